package snowflake

import (
	"errors"
	"fmt"
	"time"
)

// ErrInvalidID is returned by Decode for zero or negative IDs and by Compose
// for parts out of range.
var ErrInvalidID = errors.New("snowflake: invalid ID")

// Parts are the fields of an ID.
type Parts struct {
	// UnixMilli is the ID's time in Unix milliseconds.
	UnixMilli int64
	WorkerID  int
	Sequence  int
}

// Time returns the ID's time.
func (p Parts) Time() time.Time { return time.UnixMilli(p.UnixMilli).UTC() }

// Decode splits id into its parts, for IDs made with the given epoch.
func Decode(id, epoch int64) (Parts, error) {
	if id <= 0 {
		return Parts{}, fmt.Errorf("%w: %d is not positive", ErrInvalidID, id)
	}
	return Parts{
		UnixMilli: id>>timeShift + epoch,
		WorkerID:  int(id >> workerShift & MaxWorkerID),
		Sequence:  int(id & MaxSequence),
	}, nil
}

// Compose is the inverse of Decode.
func Compose(p Parts, epoch int64) (int64, error) {
	elapsed := p.UnixMilli - epoch
	switch {
	case elapsed < 0 || elapsed > maxElapsed:
		return 0, fmt.Errorf("%w: time %d is outside the 41 bits after epoch %d", ErrInvalidID, p.UnixMilli, epoch)
	case p.WorkerID < 0 || p.WorkerID > MaxWorkerID:
		return 0, fmt.Errorf("%w: worker ID %d is outside 0..%d", ErrInvalidID, p.WorkerID, MaxWorkerID)
	case p.Sequence < 0 || p.Sequence > MaxSequence:
		return 0, fmt.Errorf("%w: sequence %d is outside 0..%d", ErrInvalidID, p.Sequence, MaxSequence)
	}
	id := elapsed<<timeShift | int64(p.WorkerID)<<workerShift | int64(p.Sequence)
	if id == 0 {
		return 0, fmt.Errorf("%w: the parts make the ID 0", ErrInvalidID)
	}
	return id, nil
}
