package workerid

import (
	"strings"
	"testing"

	"github.com/leaf-nats/leaf/snowflake"
)

// A range that is refused says which rule it breaks, not only the form
// that is wanted: LEAF_WORKER_ID_RANGE=5-2 was once refused with "want
// first-last within 0-1023", which it looks like.
func TestRangeErrorsNameTheRule(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"5-2", "the first worker ID, 5, is above the last, 2: put the lower one first (2-5)"},
		{"0-2000", "worker ID 2000 is above 1023, the highest of the default layout"},
		{"5", "want first-last, two worker IDs of 0-1023 joined by '-'"},
		{"-1-3", "want first-last"},
		{"a-b", "want first-last"},
	} {
		_, err := ParseRange(tc.in)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), `"`+tc.in+`"`) {
			t.Errorf("ParseRange(%q) = %v, want an error naming %q and saying %q", tc.in, err, tc.in, tc.want)
		}
	}
	for _, tc := range []struct {
		r    Range
		l    snowflake.Layout
		want string
	}{
		{Range{7, 3}, snowflake.LayoutDefault, "worker ID range 7-3: the first worker ID, 7, is above the last, 3"},
		{Range{0, 1023}, snowflake.LayoutJS53, "worker ID range 0-1023: worker ID 1023 is above 15, the highest of layout js53 (0-15)"},
		{Range{-1, 3}, snowflake.LayoutDefault, "worker ID -1 is below 0, the lowest of layout default"},
	} {
		if err := tc.r.CheckIn(tc.l); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v.CheckIn(%s) = %v, want %q", tc.r, tc.l.Name(), err, tc.want)
		}
	}
	if r, err := ParseRange(" 2 - 5 "); err != nil || r != (Range{2, 5}) {
		t.Errorf("ParseRange(\" 2 - 5 \") = %v, %v; want 2-5", r, err)
	}
}
