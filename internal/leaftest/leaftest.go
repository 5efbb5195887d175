// Package leaftest simulates a Leaf deployment's leaf_alloc table, for the
// tests of its import.
package leaftest

import (
	"encoding/csv"
	"fmt"
	"strconv"
	"strings"
)

// Alloc is a row of Leaf's table (scripts/leaf_alloc.sql) in a simulated
// Leaf deployment.
type Alloc struct {
	Tag     string
	MaxID   int64
	Step    int64 // the table's step
	Desc    string
	Null    bool  // description NULL
	Highest int64 // the largest ID any segment a Leaf server took holds
}

// TakeSegments takes n segments of r as Leaf's SegmentIDGenImpl does:
// the first load with the table's step (updateMaxIdAndGetLeafAlloc), the
// next ones with a step doubled while segments last under 15 minutes,
// capped at 1,000,000 (updateMaxIdByCustomStepAndGetLeafAlloc). Each
// UPDATE ... SET max_id = max_id + step is followed, in the same
// transaction, by the segment [max_id - step, max_id): max_id is past
// every ID handed out.
func (r *Alloc) TakeSegments(n int) {
	step := r.Step
	for i := range n {
		if i > 0 && step*2 <= 1_000_000 {
			step *= 2
		}
		r.MaxID += step
		r.Highest = r.MaxID - 1 // the segment's last ID, handed out or not
	}
}

// Deployment is a Leaf table after some traffic: the README's sample
// row and the shapes Leaf's users have (Chinese descriptions, NULL, a tab
// and a backslash that mysql -B escapes, a tag never used, a step above
// the dynamic-step cap).
func Deployment() []*Alloc {
	rows := []*Alloc{
		{Tag: "leaf-segment-test", MaxID: 1, Step: 2000, Desc: "Test leaf Segment Mode Get Id"},
		{Tag: "order", MaxID: 1, Step: 1000, Desc: "订单号"},
		{Tag: "user.register", MaxID: 1, Step: 2000, Null: true},
		{Tag: "coupon_code", MaxID: 1, Step: 20, Desc: "优惠券\t编码 C:\\codes"},
		{Tag: "pay-serial", MaxID: 1, Step: 1000, Desc: "never used"},
		{Tag: "bulk", MaxID: 1, Step: 5_000_000, Desc: strings.Repeat("很长的描述", 20)},
	}
	for i, r := range rows {
		r.Highest = r.MaxID - 1
		if r.Tag != "pay-serial" {
			r.TakeSegments(3 + 2*i)
		}
	}
	return rows
}

// MySQLBatch writes rows as mysql -B -e 'select biz_tag,max_id,step,description from leaf_alloc' does.
func MySQLBatch(rows []*Alloc) string {
	esc := strings.NewReplacer(`\`, `\\`, "\t", `\t`, "\n", `\n`, "\x00", `\0`)
	var b strings.Builder
	b.WriteString("biz_tag\tmax_id\tstep\tdescription\n")
	for _, r := range rows {
		desc := esc.Replace(r.Desc)
		if r.Null {
			desc = "NULL"
		}
		fmt.Fprintf(&b, "%s\t%d\t%d\t%s\n", r.Tag, r.MaxID, r.Step, desc)
	}
	return b.String()
}

// CSV writes rows as CSV with a header, as a database tool exports them.
func CSV(rows []*Alloc) string {
	var b strings.Builder
	w := csv.NewWriter(&b)
	w.Write([]string{"biz_tag", "max_id", "step", "description", "update_time"})
	for _, r := range rows {
		w.Write([]string{r.Tag, strconv.FormatInt(r.MaxID, 10), strconv.FormatInt(r.Step, 10), r.Desc, "2020-04-12 10:00:00"})
	}
	w.Flush()
	return b.String()
}
