package main

import (
	"encoding/csv"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/leaf-nats/leaf/internal/natstest"
	"github.com/leaf-nats/leaf/internal/pgtest"
)

// leafAlloc is a row of Leaf's table (scripts/leaf_alloc.sql) in a
// simulated Leaf deployment.
type leafAlloc struct {
	tag     string
	maxID   int64
	step    int64 // the table's step
	desc    string
	null    bool  // description NULL
	highest int64 // the largest ID any segment a Leaf server took holds
}

// takeSegments takes n segments of r as Leaf's SegmentIDGenImpl does:
// the first load with the table's step (updateMaxIdAndGetLeafAlloc), the
// next ones with a step doubled while segments last under 15 minutes,
// capped at 1,000,000 (updateMaxIdByCustomStepAndGetLeafAlloc). Each
// UPDATE ... SET max_id = max_id + step is followed, in the same
// transaction, by the segment [max_id - step, max_id): max_id is past
// every ID handed out.
func (r *leafAlloc) takeSegments(n int) {
	step := r.step
	for i := range n {
		if i > 0 && step*2 <= 1_000_000 {
			step *= 2
		}
		r.maxID += step
		r.highest = r.maxID - 1 // the segment's last ID, handed out or not
	}
}

// leafDeployment is a Leaf table after some traffic: the README's sample
// row and the shapes Leaf's users have (Chinese descriptions, NULL, a tab
// and a backslash that mysql -B escapes, a tag never used, a step above
// the dynamic-step cap).
func leafDeployment() []*leafAlloc {
	rows := []*leafAlloc{
		{tag: "leaf-segment-test", maxID: 1, step: 2000, desc: "Test leaf Segment Mode Get Id"},
		{tag: "order", maxID: 1, step: 1000, desc: "订单号"},
		{tag: "user.register", maxID: 1, step: 2000, null: true},
		{tag: "coupon_code", maxID: 1, step: 20, desc: "优惠券\t编码 C:\\codes"},
		{tag: "pay-serial", maxID: 1, step: 1000, desc: "never used"},
		{tag: "bulk", maxID: 1, step: 5_000_000, desc: strings.Repeat("很长的描述", 20)},
	}
	for i, r := range rows {
		r.highest = r.maxID - 1
		if r.tag != "pay-serial" {
			r.takeSegments(3 + 2*i)
		}
	}
	return rows
}

// mysqlBatch writes rows as mysql -B -e 'select biz_tag,max_id,step,description from leaf_alloc' does.
func mysqlBatch(rows []*leafAlloc) string {
	esc := strings.NewReplacer(`\`, `\\`, "\t", `\t`, "\n", `\n`, "\x00", `\0`)
	var b strings.Builder
	b.WriteString("biz_tag\tmax_id\tstep\tdescription\n")
	for _, r := range rows {
		desc := esc.Replace(r.desc)
		if r.null {
			desc = "NULL"
		}
		fmt.Fprintf(&b, "%s\t%d\t%d\t%s\n", r.tag, r.maxID, r.step, desc)
	}
	return b.String()
}

// leafCSV writes rows as CSV with a header, as a database tool exports them.
func leafCSV(rows []*leafAlloc) string {
	var b strings.Builder
	w := csv.NewWriter(&b)
	w.Write([]string{"biz_tag", "max_id", "step", "description", "update_time"})
	for _, r := range rows {
		w.Write([]string{r.tag, strconv.FormatInt(r.maxID, 10), strconv.FormatInt(r.step, 10), r.desc, "2020-04-12 10:00:00"})
	}
	w.Flush()
	return b.String()
}

func TestParseLeafAlloc(t *testing.T) {
	rows := leafDeployment()
	tsv, err := parseLeafAlloc(strings.NewReader(mysqlBatch(rows)))
	if err != nil {
		t.Fatal(err)
	}
	csvRows, err := parseLeafAlloc(strings.NewReader("\xef\xbb\xbf" + strings.ReplaceAll(leafCSV(rows), "\n", "\r\n")))
	if err != nil {
		t.Fatal(err)
	}
	if len(tsv) != len(rows) || len(csvRows) != len(rows) {
		t.Fatalf("%d and %d rows, want %d", len(tsv), len(csvRows), len(rows))
	}
	for i, r := range rows {
		for _, got := range []leafRow{tsv[i], csvRows[i]} {
			want := r.desc
			if len(want) > 256 {
				want = truncateUTF8(want, 256)
			}
			if got.tag != r.tag || got.maxID != r.maxID || got.step != min(r.step, maxTableStep) || got.desc != want || got.line != i+2 {
				t.Errorf("row %d: %+v, want %+v", i, got, *r)
			}
		}
	}

	for _, tc := range []struct{ name, in, want string }{
		{"no header", "order\t5\t10\tx\n", "line 1: the header has no column biz_tag"},
		{"empty", "", "the file is empty"},
		{"bad rows", "biz_tag,max_id,step,description\nok,5,10,\nbad tag,1,2,x\nb,x,1,\nc,1,0,\nok,9,9,\nd,1\n",
			"5 bad row(s); nothing written:\n" +
				"line 3: segment: invalid tag: \"bad tag\" contains ' '; use only ASCII letters, digits, '_', '-' and '.'\n" +
				"line 4: tag \"b\": max_id \"x\" is not a whole number from 0\n" +
				"line 5: tag \"c\": step \"0\" is not a whole number from 1\n" +
				"line 6: tag \"ok\" again (first on line 2)\n" +
				"line 7: 2 fields, the header has 4"},
		{"bad CSV", "biz_tag,max_id,step\n\"x,1,2\n", "not CSV"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseLeafAlloc(strings.NewReader(tc.in))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}

// TestTagsImport imports a Leaf deployment's table into each store, next
// to a running vendor, and takes IDs of every tag: each continues at
// Leaf's max_id, above every ID of every segment Leaf took.
func TestTagsImport(t *testing.T) {
	for _, store := range []string{"jetstream-kv", "postgres"} {
		t.Run(store, func(t *testing.T) {
			dsn := ""
			if store == "postgres" {
				dsn = pgtest.DSN(t)
			}
			s := natstest.Server(t)
			nc := natstest.Conn(t, s)
			t.Setenv("LEAF_NATS_URL", s.ClientURL())
			t.Setenv("LEAF_POSTGRES_URL", dsn)
			t.Setenv("LEAF_NATS_STORE_DIR", t.TempDir())
			startVendor(t, nil)
			t.Setenv("LEAF_HTTP_ADDR", "")

			rows := leafDeployment()
			// One tag made here by mistake below Leaf's max_id, one above.
			if code, out := command(t, "tags", "add", "order", "-start", "5"); code != 0 {
				t.Fatal(out)
			}
			if code, out := command(t, "tags", "add", "pay-serial", "-start", "1000000000000"); code != 0 {
				t.Fatal(out)
			}
			dir := t.TempDir()
			tsv, csvFile, bad := filepath.Join(dir, "leaf_alloc.tsv"), filepath.Join(dir, "leaf_alloc.csv"), filepath.Join(dir, "bad.tsv")
			os.WriteFile(tsv, []byte(mysqlBatch(rows)), 0o644)
			os.WriteFile(csvFile, []byte(leafCSV(rows)), 0o644)
			os.WriteFile(bad, []byte(mysqlBatch(rows)+"bad tag\t1\t1\tx\n"), 0o644)
			_, before := command(t, "tags", "list")

			code, out := command(t, "tags", "import", "-dry-run", tsv)
			t.Logf("vendor tags import -dry-run:\n%s", out)
			if code != 0 || !strings.Contains(out, "dry run: would create 4, raise 1, keep 1; nothing written") {
				t.Fatalf("dry run: exit %d:\n%s", code, out)
			}
			if code, out := command(t, "tags", "import", bad); code != 1 || !strings.Contains(out, "line 8: segment: invalid tag") {
				t.Fatalf("bad file: exit %d:\n%s", code, out)
			}
			if _, after := command(t, "tags", "list"); after != before {
				t.Fatalf("the dry run or the bad file wrote:\n%s\nthen:\n%s", before, after)
			}

			code, out = command(t, "tags", "import", tsv)
			t.Logf("vendor tags import:\n%s", out)
			if code != 0 || !strings.Contains(out, "imported: created 4, raised 1, kept 1") {
				t.Fatalf("import: exit %d:\n%s", code, out)
			}
			_, listed := command(t, "tags", "list")
			for _, f := range []string{tsv, csvFile} {
				if code, out := command(t, "tags", "import", f); code != 0 || !strings.Contains(out, "nothing to change") {
					t.Fatalf("import again from %s: exit %d:\n%s", f, code, out)
				}
			}
			if _, again := command(t, "tags", "list"); again != listed {
				t.Fatalf("a second import changed the store:\n%s\nthen:\n%s", listed, again)
			}
			if !strings.Contains(listed, "优惠券") || !strings.Contains(listed, `编码 C:\codes`) {
				t.Errorf("description not carried over as Leaf had it:\n%s", listed)
			}

			var checked int
			for _, r := range rows {
				first := r.maxID
				if r.tag == "pay-serial" {
					first = 1_000_000_000_000
				}
				ids := slices.Concat(segmentIDs(t, nc, r.tag, 1), segmentIDs(t, nc, r.tag, 5000), segmentIDs(t, nc, r.tag, 5000))
				if ids[0] != first || ids[0] <= r.highest {
					t.Errorf("tag %s: first ID %d, want %d (Leaf's max_id %d, its highest ID %d)", r.tag, ids[0], first, r.maxID, r.highest)
				}
				for i := 1; i < len(ids); i++ {
					if ids[i] <= ids[i-1] {
						t.Fatalf("tag %s: IDs not increasing: %d then %d", r.tag, ids[i-1], ids[i])
					}
				}
				checked += len(ids)
				t.Logf("tag %-17s Leaf max_id %-8d highest Leaf ID %-8d first ID now %d", r.tag, r.maxID, r.highest, ids[0])
			}
			t.Logf("%s: %d IDs of %d imported tags, every one above every ID Leaf's segments held", store, checked, len(rows))
		})
	}
}
