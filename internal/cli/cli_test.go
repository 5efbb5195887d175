package cli

import "testing"

// A synopsis's <arguments> are positional, but those that are a -flag's
// value; [bracketed] ones are optional.
func TestArgumentsOfASynopsis(t *testing.T) {
	for _, tc := range []struct {
		synopsis       string
		required, most int
	}{
		{"vendor tags add <tag> [-step N] [-start M]", 1, 1},
		{"vendor tags set-step <tag> <N>", 2, 2},
		{"vendor tags raise [<tag>] [-all] [-to N]", 0, 1},
		{"vendor cluster move-segments [-from kv|<postgres URL>] [-lost] [-why TEXT]", 0, 0},
		{"vendor tags import [-dry-run] [-gap N] <file>", 1, 1},
		{"vendor cluster reset-worker <id> [-force]", 1, 1},
	} {
		if r, m := Arguments(tc.synopsis); r != tc.required || m != tc.most {
			t.Errorf("Arguments(%q) = %d, %d; want %d, %d", tc.synopsis, r, m, tc.required, tc.most)
		}
	}
}
