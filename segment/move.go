package segment

import (
	"context"
	"errors"
	"fmt"
)

// Move moves the segments of from to the store named toName, to: it seals
// from (no allocation succeeds after), then raises every row of to to where
// it was in from, deleted tags too, so that no tag hands out an ID from
// hands out. It calls moved with each row carried over and returns how many
// it carried. Running it again after an interruption finishes the move.
func Move(ctx context.Context, from, to AdminStore, toName string, moved func(Row)) (int, error) {
	rows, err := from.Seal(ctx, toName)
	if err != nil {
		return 0, fmt.Errorf("stop the old store handing out segments: %w", err)
	}
	for _, r := range rows {
		if err := to.Raise(ctx, r); err != nil {
			if !r.Retired && errors.Is(err, ErrInvalidStep) {
				r.Step = min(max(r.Step, 1), DefaultMaxStep)
				err = to.Raise(ctx, r)
			}
			if err != nil {
				return 0, fmt.Errorf("carry tag %q over (the move can be run again): %w", r.Tag, err)
			}
		}
		moved(r)
	}
	return len(rows), nil
}
