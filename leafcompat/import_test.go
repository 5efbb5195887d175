package leafcompat

import (
	"strings"
	"testing"

	"github.com/leaf-nats/leaf/internal/leaftest"
	"github.com/leaf-nats/leaf/segment"
)

func TestParseLeafAlloc(t *testing.T) {
	rows := leaftest.Deployment()
	tsv, err := ParseLeafAlloc(strings.NewReader(leaftest.MySQLBatch(rows)))
	if err != nil {
		t.Fatal(err)
	}
	csvRows, err := ParseLeafAlloc(strings.NewReader("\xef\xbb\xbf" + strings.ReplaceAll(leaftest.CSV(rows), "\n", "\r\n")))
	if err != nil {
		t.Fatal(err)
	}
	if len(tsv) != len(rows) || len(csvRows) != len(rows) {
		t.Fatalf("%d and %d rows, want %d", len(tsv), len(csvRows), len(rows))
	}
	for i, r := range rows {
		for _, got := range []Row{tsv[i], csvRows[i]} {
			want := r.Desc
			if len(want) > 256 {
				want = truncateUTF8(want, 256)
			}
			if got.Tag != r.Tag || got.MaxID != r.MaxID || got.Step != min(r.Step, segment.DefaultMaxStep) || got.Desc != want || got.Line != i+2 {
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
			_, err := ParseLeafAlloc(strings.NewReader(tc.in))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}
