package main

import (
	"context"
	"flag"
	"strings"
	"testing"
)

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
			if c.Summary == "" || !strings.Contains(help, "  "+c.Synopsis+"\n      "+c.Summary+"\n") {
				t.Errorf("vendor -h lacks %q with its summary", c.Synopsis)
			}
			fs := flag.NewFlagSet(c.Name, flag.ContinueOnError)
			c.Flags(fs)
			fs.VisitAll(func(f *flag.Flag) {
				if !strings.Contains(c.Synopsis, "[-"+f.Name+" ") && !strings.Contains(c.Synopsis, "[-"+f.Name+"]") {
					t.Errorf("%q does not name its flag -%s", c.Synopsis, f.Name)
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
