package leafcompat

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/leaf-nats/leaf/segment"
)

// Row is one row of Leaf's leaf_alloc as a dump gives it.
type Row struct {
	Line  int
	Tag   string
	MaxID int64
	Step  int64
	Desc  string
	Notes []string // what the import changed to fit it, for the plan
}

// Leaf's column names, as its scripts/leaf_alloc.sql creates them.
var leafColumns = []string{"biz_tag", "max_id", "step", "description"}

// ParseLeafAlloc reads a dump of leaf_alloc: mysql -B's tab-separated
// output or CSV, each with a header line naming the columns. It returns
// every row, or an error naming every bad line.
func ParseLeafAlloc(r io.Reader) ([]Row, error) {
	records, lines, err := readRecords(r)
	if err != nil {
		return nil, err
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
	var (
		rows []Row
		errs []error
		seen = map[string]int{}
	)
	for i, rec := range records[1:] {
		line := lines[i+1]
		row, err := parseRow(rec, len(records[0]), col, line)
		if err == nil {
			if prev, dup := seen[row.Tag]; dup {
				err = fmt.Errorf("tag %q again (first on line %d)", row.Tag, prev)
			}
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("line %d: %w", line, err))
			continue
		}
		seen[row.Tag] = line
		rows = append(rows, row)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%d bad row(s); nothing written:\n%w", len(errs), errors.Join(errs...))
	}
	return rows, nil
}

// readRecords reads mysql -B's tab-separated output or CSV into records
// with their line numbers; the first is the header.
func readRecords(r io.Reader) (records [][]string, lines []int, err error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, nil, err
	}
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf")) // a BOM from a spreadsheet
	first, _, _ := bytes.Cut(data, []byte("\n"))
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
				return nil, nil, fmt.Errorf("not CSV: %w (give mysql -B's tab-separated output, or CSV)", err)
			}
			line, _ := cr.FieldPos(0)
			records, lines = append(records, rec), append(lines, line)
		}
	}
	if len(records) == 0 {
		return nil, nil, errors.New("the file is empty: want a header line (biz_tag, max_id, step, description) and Leaf's rows")
	}
	return records, lines, nil
}

// parseRow reads one record of fields fields (the header's count), whose
// columns col names, checking each value.
func parseRow(rec []string, fields int, col map[string]int, line int) (Row, error) {
	if len(rec) != fields {
		return Row{}, fmt.Errorf("%d fields, the header has %d", len(rec), fields)
	}
	row := Row{Line: line, Tag: rec[col["biz_tag"]]}
	if err := segment.ValidateTag(row.Tag); err != nil {
		return Row{}, err
	}
	var err error
	if row.MaxID, err = strconv.ParseInt(strings.TrimSpace(rec[col["max_id"]]), 10, 64); err != nil || row.MaxID < 0 {
		return Row{}, fmt.Errorf("tag %q: max_id %q is not a whole number from 0", row.Tag, rec[col["max_id"]])
	}
	if row.Step, err = strconv.ParseInt(strings.TrimSpace(rec[col["step"]]), 10, 64); err != nil || row.Step < 1 {
		return Row{}, fmt.Errorf("tag %q: step %q is not a whole number from 1", row.Tag, rec[col["step"]])
	}
	if row.Step > segment.DefaultMaxStep {
		row.Notes = append(row.Notes, fmt.Sprintf("step %d capped at %d", row.Step, segment.DefaultMaxStep))
		row.Step = segment.DefaultMaxStep
	}
	if i, ok := col["description"]; ok {
		row.Desc = rec[i]
		if row.Desc == "NULL" {
			row.Desc = "" // mysql -B's NULL
		}
		if len(row.Desc) > segment.MaxDescriptionLen {
			// MySQL's varchar(256) counts characters, ours bytes.
			row.Desc = truncateUTF8(row.Desc, segment.MaxDescriptionLen)
			row.Notes = append(row.Notes, fmt.Sprintf("description cut to %d bytes", segment.MaxDescriptionLen))
		}
	}
	return row, nil
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

// Step is what the import does to one tag.
type Step struct {
	Row
	Action string // create, raise or keep
	NextID int64  // the tag's next ID after the import
	Was    int64  // its next ID before, for raise and keep
}

// PlanImport decides, for each of Leaf's rows, what to do given the rows
// the store has: the tag's next ID must be at least Leaf's max_id + gap.
func PlanImport(rows []Row, have []segment.Row, gap int64) []Step {
	current := map[string]int64{}
	for _, r := range have {
		current[r.Tag] = r.MaxID
	}
	plan := make([]Step, 0, len(rows))
	for _, r := range rows {
		s := Step{Row: r, NextID: max(r.MaxID+gap, 1)}
		was, ok := current[r.Tag]
		switch {
		case !ok:
			s.Action = "create"
		case was >= s.NextID:
			s.Action, s.Was, s.NextID = "keep", was, was
		default:
			s.Action, s.Was = "raise", was
		}
		plan = append(plan, s)
	}
	return plan
}

// PrintPlan prints plan as a table, a line per tag.
func PrintPlan(w io.Writer, plan []Step, gap int64) {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "LINE\tACTION\tTAG\tLEAF_MAX_ID\tNEXT_ID\tSTEP\tNOTE")
	for _, s := range plan {
		var note []string
		switch s.Action {
		case "raise":
			note = append(note, fmt.Sprintf("next ID was %d", s.Was))
		case "keep":
			note = append(note, "already at or above Leaf's max_id")
			if gap > 0 {
				note[0] = fmt.Sprintf("already at or above Leaf's max_id + %d", gap)
			}
		}
		step := "-" // a tag that exists keeps its step (vendor tags set-step changes it)
		if s.Action == "create" {
			step = strconv.FormatInt(s.Step, 10)
			note = append(note, s.Notes...)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%s\t%s\n", s.Line, s.Action, s.Tag, s.MaxID, s.NextID, step, strings.Join(note, "; "))
	}
	tw.Flush()
}

// CheckGap refuses rows whose max_id plus gap leaves no room for IDs.
func CheckGap(rows []Row, gap int64) error {
	for _, r := range rows {
		if r.MaxID > math.MaxInt64/2-gap {
			return fmt.Errorf("line %d: tag %q: max_id %d plus -gap %d leaves no room for IDs", r.Line, r.Tag, r.MaxID, gap)
		}
	}
	return nil
}

// Importing is an import of Leaf's rows.
type Importing struct {
	Rows   []Row
	From   string // where the rows come from, for people
	Gap    int64  // IDs above Leaf's max_id
	DryRun bool   // print the plan, write nothing
}

// Store is what an import writes to (segment.AdminStore).
type Store interface {
	List(ctx context.Context) ([]segment.Row, error)
	Raise(ctx context.Context, r segment.Row) error
}

// Import plans im against st (nil: a store not made yet, for a dry run),
// prints the plan to w and, unless a dry run, carries it out: each tag is
// created, or raised so that its next ID is at least Leaf's max_id plus
// the gap. where names st for people.
func Import(ctx context.Context, im Importing, st Store, where string, w io.Writer) error {
	var have []segment.Row
	if st != nil {
		lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		var err error
		have, err = st.List(lctx)
		cancel()
		if err != nil {
			return fmt.Errorf("list the tags in %s: %w", where, err)
		}
	}
	plan := PlanImport(im.Rows, have, im.Gap)
	fmt.Fprintf(w, "%d row(s) of Leaf's leaf_alloc from %s, into %s:\n", len(im.Rows), im.From, where)
	PrintPlan(w, plan, im.Gap)
	creates, raises := 0, 0
	for _, s := range plan {
		creates += b2i(s.Action == "create")
		raises += b2i(s.Action == "raise")
	}
	keeps := len(plan) - creates - raises
	if im.DryRun {
		fmt.Fprintf(w, "dry run: would create %d, raise %d, keep %d; nothing written\n", creates, raises, keeps)
		return nil
	}
	for _, s := range plan {
		if s.Action == "keep" {
			continue
		}
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := st.Raise(wctx, segment.Row{Tag: s.Tag, MaxID: s.NextID, Step: s.Step, Description: s.Desc})
		cancel()
		if err != nil {
			return fmt.Errorf("tag %q (line %d): %w (the tags before it are imported; run the import again to finish, it skips them)", s.Tag, s.Line, err)
		}
	}
	if raises > 0 {
		fmt.Fprintln(w, "note: a running vendor that served a raised tag before the import may still hold up to two segments of it "+
			"from below Leaf's max_id; restart such vendors before Leaf's clients take that tag from them")
	}
	if creates+raises == 0 {
		fmt.Fprintln(w, "nothing to change: every tag is at or above Leaf's max_id")
		return nil
	}
	fmt.Fprintf(w, "imported: created %d, raised %d, kept %d; vendors serve new tags at their first request and every tag within a minute\n", creates, raises, keeps)
	return nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
