package leafcompat

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
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
		rows []Row
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
		row := Row{Line: line, Tag: rec[col["biz_tag"]]}
		if err := segment.ValidateTag(row.Tag); err != nil {
			bad(line, "%v", err)
			continue
		}
		if prev, dup := seen[row.Tag]; dup {
			bad(line, "tag %q again (first on line %d)", row.Tag, prev)
			continue
		}
		seen[row.Tag] = line
		var err error
		if row.MaxID, err = strconv.ParseInt(strings.TrimSpace(rec[col["max_id"]]), 10, 64); err != nil || row.MaxID < 0 {
			bad(line, "tag %q: max_id %q is not a whole number from 0", row.Tag, rec[col["max_id"]])
			continue
		}
		if row.Step, err = strconv.ParseInt(strings.TrimSpace(rec[col["step"]]), 10, 64); err != nil || row.Step < 1 {
			bad(line, "tag %q: step %q is not a whole number from 1", row.Tag, rec[col["step"]])
			continue
		}
		if row.Step > segment.DefaultMaxStep {
			row.Notes = append(row.Notes, fmt.Sprintf("step %d capped at %d", row.Step, segment.DefaultMaxStep))
			row.Step = segment.DefaultMaxStep
		}
		if hasDesc {
			row.Desc = rec[descCol]
			if row.Desc == "NULL" {
				row.Desc = "" // mysql -B's NULL
			}
			if len(row.Desc) > segment.MaxDescriptionLen {
				// MySQL's varchar(256) counts characters, ours bytes.
				row.Desc = truncateUTF8(row.Desc, segment.MaxDescriptionLen)
				row.Notes = append(row.Notes, fmt.Sprintf("description cut to %d bytes", segment.MaxDescriptionLen))
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
