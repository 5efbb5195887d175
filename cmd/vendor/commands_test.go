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

// vendor tags -h and vendor cluster -h, written by hand, show each
// subcommand's synopsis as vendor -h does, every flag included (tags -h
// once left out raise -step).
func TestGroupHelpNamesEveryCommand(t *testing.T) {
	for _, g := range []struct {
		name string
		subs []subcommand
	}{{"tags", tagCommands}, {"cluster", clusterCommands}} {
		var out syncBuffer
		if code := run(context.Background(), []string{g.name, "-h"}, &out, &out); code != 0 {
			t.Fatalf("vendor %s -h exited %d", g.name, code)
		}
		for _, c := range g.subs {
			if !strings.Contains(out.String(), "  "+c.Synopsis) {
				t.Errorf("vendor %s -h lacks %q", g.name, c.Synopsis)
			}
		}
	}
}
