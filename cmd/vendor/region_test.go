package main

import (
	"strings"
	"testing"

	"github.com/leaf-nats/leaf/segment"
)

// A region is a name and a number, both or neither; its number picks the
// worker IDs and segment IDs the vendor may use, and both are a term of
// the cluster contract.
func TestRegionConfiguration(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string // in the error; "" for none
	}{
		{"none", nil, ""},
		{"name only", map[string]string{"LEAF_REGION": "east"}, "set both"},
		{"number only", map[string]string{"LEAF_REGION_ID": "1"}, "set both"},
		{"bad name", map[string]string{"LEAF_REGION": "east.1", "LEAF_REGION_ID": "1"}, "LEAF_REGION \"east.1\""},
		{"number too large", map[string]string{"LEAF_REGION": "east", "LEAF_REGION_ID": "8"}, "LEAF_REGION_ID \"8\": want 0..7"},
		{"js53 has four", map[string]string{"LEAF_REGION": "east", "LEAF_REGION_ID": "4", "LEAF_SNOWFLAKE_LAYOUT": "js53"}, "want 0..3"},
		{"range outside the region", map[string]string{"LEAF_REGION": "east", "LEAF_REGION_ID": "1", "LEAF_WORKER_ID_RANGE": "0-127"}, "not within 128-255, the worker IDs of region east/1"},
		{"good", map[string]string{"LEAF_REGION": "eu-west", "LEAF_REGION_ID": "2"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			c, err := loadConfig()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want one saying %q", err, tc.want)
			}
			if tc.name != "good" {
				return
			}
			b, _ := segment.RegionBlock(2)
			if c.Block() != b || c.WorkerIDs() != "256-383" || c.Terms().Region != "eu-west/2" {
				t.Fatalf("region eu-west/2: block %+v, worker IDs %s, contract region %q", c.Block(), c.WorkerIDs(), c.Terms().Region)
			}
		})
	}
}
