package main

import (
	"context"
	"flag"
	"strings"
	"testing"
)

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
		if r, m := arguments(tc.synopsis); r != tc.required || m != tc.most {
			t.Errorf("arguments(%q) = %d, %d; want %d, %d", tc.synopsis, r, m, tc.required, tc.most)
		}
	}
}

// vendor -h lists every command with its synopsis and what it does, and a
// synopsis names every flag its command takes: help cannot drift from the
// commands, since it is made from them and checked against their flags.
func TestHelpListsEveryCommand(t *testing.T) {
	var out syncBuffer
	if code := run(context.Background(), []string{"-h"}, &out, &out); code != 0 {
		t.Fatalf("vendor -h exited %d", code)
	}
	help := out.String()
	for _, group := range [][]subcommand{tagCommands, clusterCommands} {
		for _, c := range group {
			if c.summary == "" || !strings.Contains(help, "  "+c.synopsis+"\n      "+c.summary+"\n") {
				t.Errorf("vendor -h lacks %q with its summary", c.synopsis)
			}
			fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
			c.flags(fs)
			fs.VisitAll(func(f *flag.Flag) {
				if !strings.Contains(c.synopsis, "[-"+f.Name+" ") && !strings.Contains(c.synopsis, "[-"+f.Name+"]") {
					t.Errorf("%q does not name its flag -%s", c.synopsis, f.Name)
				}
			})
		}
	}
	for _, want := range []string{"vendor healthcheck", "vendor version"} {
		if !strings.Contains(help, "  "+want) {
			t.Errorf("vendor -h lacks %s", want)
		}
	}
}
