package main

import (
	"strings"
	"testing"
)

// LEAF_SNOWFLAKE_LAYOUT bounds the worker IDs: each bad combination is
// refused naming the setting to change; unset, the range is the layout's.
func TestLayoutBoundsTheWorkerIDs(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want string // "" for valid
		ids  string
	}{
		{map[string]string{}, "", "0-1023"},
		{map[string]string{"LEAF_SNOWFLAKE_LAYOUT": "js53"}, "", "0-15"},
		{map[string]string{"LEAF_SNOWFLAKE_LAYOUT": "11+41+4+8", "LEAF_WORKER_ID_RANGE": "4-7", "LEAF_WORKER_ID": "5"}, "", "4-7"},
		{map[string]string{"LEAF_SNOWFLAKE_LAYOUT": "js64"}, "LEAF_SNOWFLAKE_LAYOUT \"js64\": want 1+41+10+12", ""},
		{map[string]string{"LEAF_SNOWFLAKE_LAYOUT": "js53", "LEAF_WORKER_ID_RANGE": "0-1023"},
			"LEAF_WORKER_ID_RANGE 0-1023 is not within 0-15, the worker IDs of LEAF_SNOWFLAKE_LAYOUT=js53", ""},
		{map[string]string{"LEAF_SNOWFLAKE_LAYOUT": "js53", "LEAF_WORKER_ID": "16"},
			"LEAF_WORKER_ID \"16\": want 0..15 (the worker IDs of LEAF_SNOWFLAKE_LAYOUT=js53)", ""},
	} {
		t.Run(tc.want, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			c, err := loadConfig()
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("%v: %v, want %q", tc.env, err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatalf("%v: %v", tc.env, err)
			}
			if got := c.Terms().WorkerIDs; got != tc.ids {
				t.Fatalf("%v: the contract's worker IDs %s, want %s", tc.env, got, tc.ids)
			}
		})
	}
}
