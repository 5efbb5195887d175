package segment

import (
	"context"
	"errors"
	"fmt"
	"math"
)

// Raising says how RaiseAll raises tags: every ID handed out from now on
// is at least To, or at least By above the next ID its row says it hands
// out.
type Raising struct {
	Tag    string // "": every tag
	To, By int64  // one of them
	// Step is the step of a row written anew: one that cannot be read
	// (a corrupt row), which only To can raise.
	Step int64
}

// RaiseAll raises r.Tag, or every tag, in st, never lowering one; it calls
// changed with each row raised and its next ID before, and returns how many
// it raised. It repairs a row written over, and a store that went back
// with everything that recorded its marks.
func RaiseAll(ctx context.Context, st AdminStore, r Raising, changed func(row Row, was int64)) (int, error) {
	tags, err := st.Tags(ctx) // every tag, those whose rows cannot be read too
	if err != nil {
		return 0, err
	}
	rows, listErr := st.List(ctx) // the rows that can be read
	if rows == nil && listErr != nil {
		return 0, listErr
	}
	byTag := make(map[string]Row, len(rows))
	for _, row := range rows {
		byTag[row.Tag] = row
	}
	var targets []string
	for _, t := range tags {
		if r.Tag == "" || t.Tag == r.Tag {
			targets = append(targets, t.Tag)
		}
	}
	if r.Tag != "" && len(targets) == 0 {
		return 0, &TagError{Tag: r.Tag, Err: ErrUnknownTag}
	}
	n := 0
	var errs []error
	for _, tag := range targets {
		raised, was, err := raiseOne(ctx, st, r, tag, byTag, listErr)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if raised != nil {
			changed(*raised, was)
			n++
		}
	}
	return n, errors.Join(errs...)
}

// raiseOne raises tag as r says; nil when it is there already.
func raiseOne(ctx context.Context, st AdminStore, r Raising, tag string, rows map[string]Row, listErr error) (*Row, int64, error) {
	row, ok := rows[tag]
	target := r.To
	if r.By > 0 {
		if !ok {
			return nil, 0, fmt.Errorf("tag %q: its row cannot be read (%v), so nothing says how far it got: raise it with -to", tag, listErr)
		}
		if row.MaxID > math.MaxInt64-r.By {
			return nil, 0, fmt.Errorf("tag %q: %d above its next ID %d passes the largest ID", tag, r.By, row.MaxID)
		}
		target = row.MaxID + r.By
	}
	if ok && row.MaxID >= target {
		return nil, 0, nil
	}
	was := row.MaxID
	next := Row{Tag: tag, MaxID: target, Step: r.Step, Description: row.Description, Strict: row.Strict}
	if ok {
		next.Step = row.Step
	}
	if err := st.Raise(ctx, next); err != nil {
		return nil, 0, fmt.Errorf("tag %q: %w", tag, err)
	}
	return &next, was, nil
}
