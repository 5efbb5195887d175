package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leaf-nats/leaf/segment"
)

const importUsage = `Usage: vendor tags import [-dry-run] [-gap N] <file>

Takes Leaf's leaf_alloc rows, so that no ID Leaf handed out is handed out
again: each tag is created, or raised if it exists below, so that its next
ID is Leaf's max_id (plus -gap). Leaf's max_id is past every ID of every
segment a Leaf server took (it is raised, in the transaction that takes a
segment, to the segment's end); a tag already at or above it is left alone,
so running the import again changes nothing.

<file> (- for standard input) is the output of
  mysql -B -e 'select biz_tag,max_id,step,description from leaf_alloc' leaf
tab-separated with its header line, or the same columns as CSV with a
header. Other columns (update_time) are ignored. Every row is checked
before anything is written: a bad row is reported with its line number and
nothing is written.

Flags:
  -dry-run  print the plan, write nothing
  -gap N    start each tag N IDs above Leaf's max_id: room for the IDs a
            Leaf server still running hands out until it is stopped
`

// leafRow is one row of Leaf's leaf_alloc as a dump gives it.
type leafRow struct {
	line  int
	tag   string
	maxID int64
	step  int64
	desc  string
	notes []string // what the import changed to fit it, for the plan
}

// Leaf's column names, as its scripts/leaf_alloc.sql creates them.
var leafColumns = []string{"biz_tag", "max_id", "step", "description"}

// parseLeafAlloc reads a dump of leaf_alloc: mysql -B's tab-separated
// output or CSV, each with a header line naming the columns. It returns
// every row, or an error naming every bad line.
func parseLeafAlloc(r io.Reader) ([]leafRow, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf")) // a BOM from a spreadsheet
	first, _, _ := bytes.Cut(data, []byte("\n"))
	var records [][]string
	var lines []int
	if bytes.Contains(first, []byte("\t")) {
		records, lines = readMySQLBatch(data)
	} else {
		cr := csv.NewReader(bytes.NewReader(data))
		cr.FieldsPerRecord = -1
		cr.TrimLeadingSpace = true
		for {
			rec, err := cr.Read()
			if err == io.EOF {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("not CSV: %w (give mysql -B's tab-separated output, or CSV)", err)
			}
			line, _ := cr.FieldPos(0)
			records, lines = append(records, rec), append(lines, line)
		}
	}
	if len(records) == 0 {
		return nil, errors.New("the file is empty: want a header line (biz_tag, max_id, step, description) and Leaf's rows")
	}
	col := map[string]int{}
	for i, name := range records[0] {
		col[strings.ToLower(strings.Trim(strings.TrimSpace(name), "`\""))] = i
	}
	for _, name := range leafColumns[:3] {
		if _, ok := col[name]; !ok {
			return nil, fmt.Errorf("line %d: the header has no column %s; want a header line naming biz_tag, max_id, step and description (mysql -B prints it; do not use -N)",
				lines[0], name)
		}
	}
	descCol, hasDesc := col["description"]
	var (
		rows []leafRow
		errs []error
		seen = map[string]int{}
	)
	bad := func(line int, format string, a ...any) {
		errs = append(errs, fmt.Errorf("line %d: "+format, append([]any{line}, a...)...))
	}
	for i, rec := range records[1:] {
		line := lines[i+1]
		if len(rec) != len(records[0]) {
			bad(line, "%d fields, the header has %d", len(rec), len(records[0]))
			continue
		}
		row := leafRow{line: line, tag: rec[col["biz_tag"]]}
		if err := segment.ValidateTag(row.tag); err != nil {
			bad(line, "%v", err)
			continue
		}
		if prev, dup := seen[row.tag]; dup {
			bad(line, "tag %q again (first on line %d)", row.tag, prev)
			continue
		}
		seen[row.tag] = line
		var err error
		if row.maxID, err = strconv.ParseInt(strings.TrimSpace(rec[col["max_id"]]), 10, 64); err != nil || row.maxID < 0 {
			bad(line, "tag %q: max_id %q is not a whole number from 0", row.tag, rec[col["max_id"]])
			continue
		}
		if row.step, err = strconv.ParseInt(strings.TrimSpace(rec[col["step"]]), 10, 64); err != nil || row.step < 1 {
			bad(line, "tag %q: step %q is not a whole number from 1", row.tag, rec[col["step"]])
			continue
		}
		if row.step > maxTableStep {
			row.notes = append(row.notes, fmt.Sprintf("step %d capped at %d", row.step, maxTableStep))
			row.step = maxTableStep
		}
		if hasDesc {
			row.desc = rec[descCol]
			if row.desc == "NULL" {
				row.desc = "" // mysql -B's NULL
			}
			if len(row.desc) > segment.MaxDescriptionLen {
				// MySQL's varchar(256) counts characters, ours bytes.
				row.desc = truncateUTF8(row.desc, segment.MaxDescriptionLen)
				row.notes = append(row.notes, fmt.Sprintf("description cut to %d bytes", segment.MaxDescriptionLen))
			}
		}
		rows = append(rows, row)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%d bad row(s); nothing written:\n%w", len(errs), errors.Join(errs...))
	}
	return rows, nil
}

// readMySQLBatch splits mysql -B output into records with their line
// numbers, undoing its escapes (\t \n \\ \0 and the like) in each field.
func readMySQLBatch(data []byte) (records [][]string, lines []int) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
	for n := 1; sc.Scan(); n++ {
		text := strings.TrimSuffix(sc.Text(), "\r")
		if strings.TrimSpace(text) == "" {
			continue
		}
		fields := strings.Split(text, "\t")
		for i, f := range fields {
			fields[i] = unescapeMySQL(f)
		}
		records, lines = append(records, fields), append(lines, n)
	}
	return records, lines
}

// unescapeMySQL undoes the escapes of mysql's batch output.
func unescapeMySQL(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		i++
		switch s[i] {
		case 't':
			b.WriteByte('\t')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case '0':
			b.WriteByte(0)
		case 'b':
			b.WriteByte('\b')
		default:
			b.WriteByte(s[i])
		}
	}
	return b.String()
}

// truncateUTF8 cuts s to at most n bytes without splitting a character.
func truncateUTF8(s string, n int) string {
	for n > 0 && n < len(s) && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// importStep is what the import does to one tag.
type importStep struct {
	leafRow
	action string // create, raise or keep
	nextID int64  // the tag's next ID after the import
	was    int64  // its next ID before, for raise and keep
}

// planImport decides, for each of Leaf's rows, what to do given the rows
// the store has: the tag's next ID must be at least Leaf's max_id + gap.
func planImport(rows []leafRow, have []segment.Row, gap int64) []importStep {
	current := map[string]int64{}
	for _, r := range have {
		current[r.Tag] = r.MaxID
	}
	plan := make([]importStep, 0, len(rows))
	for _, r := range rows {
		s := importStep{leafRow: r, nextID: max(r.maxID+gap, 1)}
		was, ok := current[r.tag]
		switch {
		case !ok:
			s.action = "create"
		case was >= s.nextID:
			s.action, s.was, s.nextID = "keep", was, was
		default:
			s.action, s.was = "raise", was
		}
		plan = append(plan, s)
	}
	return plan
}

// tagsImport is vendor tags import.
func tagsImport(ctx context.Context, cfg Config, args []string, stdin io.Reader, stdout io.Writer) error {
	fs := flag.NewFlagSet("vendor tags import", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	dryRun := fs.Bool("dry-run", false, "")
	gap := fs.Int64("gap", 0, "")
	pos, err := parseInterspersed(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, importUsage)
		return err
	}
	if err != nil {
		return usagef("%v; usage: vendor tags import [-dry-run] [-gap N] <file>", err)
	}
	if len(pos) != 1 {
		return usagef("import takes one file (- for standard input), got %d; usage: vendor tags import [-dry-run] [-gap N] <file>", len(pos))
	}
	if *gap < 0 {
		return usagef("-gap %d: want 0 or more IDs", *gap)
	}
	in, name := stdin, "standard input"
	if pos[0] != "-" {
		f, err := os.Open(pos[0])
		if err != nil {
			return err
		}
		defer f.Close()
		in, name = f, pos[0]
	}
	rows, err := parseLeafAlloc(in)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	for _, r := range rows {
		if r.maxID > math.MaxInt64/2-*gap {
			return fmt.Errorf("%s: line %d: tag %q: max_id %d plus -gap %d leaves no room for IDs", name, r.line, r.tag, r.maxID, *gap)
		}
	}

	st, where, closeStore, err := openTagStore(ctx, cfg, !*dryRun)
	var have []segment.Row
	switch {
	case *dryRun && (errors.Is(err, errNoStore) || errors.Is(err, jetstream.ErrBucketNotFound)):
		where = "a store not made yet (the import makes it)"
	case err != nil:
		return err
	default:
		defer closeStore()
		lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		have, err = st.List(lctx)
		cancel()
		if err != nil {
			return fmt.Errorf("list the tags in %s: %w", where, err)
		}
	}
	plan := planImport(rows, have, *gap)
	fmt.Fprintf(stdout, "%d row(s) of Leaf's leaf_alloc from %s, into %s:\n", len(rows), name, where)
	printPlan(stdout, plan, *gap)
	var creates, raises int
	for _, s := range plan {
		switch s.action {
		case "create":
			creates++
		case "raise":
			raises++
		}
	}
	if *dryRun {
		fmt.Fprintf(stdout, "dry run: would create %d, raise %d, keep %d; nothing written\n", creates, raises, len(plan)-creates-raises)
		return nil
	}
	for _, s := range plan {
		if s.action == "keep" {
			continue
		}
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := st.Raise(wctx, segment.Row{Tag: s.tag, MaxID: s.nextID, Step: s.step, Description: s.desc})
		cancel()
		if err != nil {
			return fmt.Errorf("tag %q (line %d): %w (the tags before it are imported; run the import again to finish, it skips them)", s.tag, s.line, err)
		}
	}
	if raises > 0 {
		fmt.Fprintln(stdout, "note: a running vendor that served a raised tag before the import may still hold up to two segments of it from below Leaf's max_id; restart such vendors before Leaf's clients take that tag from them")
	}
	if creates+raises == 0 {
		fmt.Fprintln(stdout, "nothing to change: every tag is at or above Leaf's max_id")
		return nil
	}
	fmt.Fprintf(stdout, "imported: created %d, raised %d, kept %d; vendors serve new tags at their first request and every tag within a minute\n",
		creates, raises, len(plan)-creates-raises)
	return nil
}

func printPlan(w io.Writer, plan []importStep, gap int64) {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "LINE\tACTION\tTAG\tLEAF_MAX_ID\tNEXT_ID\tSTEP\tNOTE")
	for _, s := range plan {
		var note []string
		switch s.action {
		case "raise":
			note = append(note, fmt.Sprintf("next ID was %d", s.was))
		case "keep":
			note = append(note, "already at or above Leaf's max_id")
			if gap > 0 {
				note[0] = fmt.Sprintf("already at or above Leaf's max_id + %d", gap)
			}
		}
		step := "-" // a tag that exists keeps its step (vendor tags set-step changes it)
		if s.action == "create" {
			step = strconv.FormatInt(s.step, 10)
			note = append(note, s.notes...)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%s\t%s\n", s.line, s.action, s.tag, s.maxID, s.nextID, step, strings.Join(note, "; "))
	}
	tw.Flush()
}
