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

// Decode splits id into its parts, for IDs made in LayoutDefault with the
// given epoch.
func Decode(id, epoch int64) (Parts, error) { return LayoutDefault.Decode(id, epoch) }

// Compose is the inverse of Decode.
func Compose(p Parts, epoch int64) (int64, error) { return LayoutDefault.Compose(p, epoch) }

// Decode splits id into its parts, for IDs made in layout l with the given
// epoch. An ID with bits set above the layout's is not one of its IDs.
func (l Layout) Decode(id, epoch int64) (Parts, error) {
	t, w, s := l.bits()
	switch {
	case id <= 0:
		return Parts{}, fmt.Errorf("%w: %d is not positive", ErrInvalidID, id)
	case id>>(t+w+s) != 0:
		return Parts{}, fmt.Errorf("%w: %d has bits above the %d of layout %s (%s)", ErrInvalidID, id, t+w+s, l.Name(), l)
	}
	return Parts{
		UnixMilli: id>>(w+s) + epoch,
		WorkerID:  int(id >> s & int64(l.MaxWorkerID())),
		Sequence:  int(id & int64(l.MaxSequence())),
	}, nil
}

// Compose is the inverse of Decode.
func (l Layout) Compose(p Parts, epoch int64) (int64, error) {
	t, w, s := l.bits()
	elapsed := p.UnixMilli - epoch
	switch {
	case elapsed < 0 || elapsed > l.MaxElapsed():
		return 0, fmt.Errorf("%w: time %d is outside the %d bits after epoch %d", ErrInvalidID, p.UnixMilli, t, epoch)
	case p.WorkerID < 0 || p.WorkerID > l.MaxWorkerID():
		return 0, fmt.Errorf("%w: worker ID %d is outside 0..%d", ErrInvalidID, p.WorkerID, l.MaxWorkerID())
	case p.Sequence < 0 || p.Sequence > l.MaxSequence():
		return 0, fmt.Errorf("%w: sequence %d is outside 0..%d", ErrInvalidID, p.Sequence, l.MaxSequence())
	}
	id := elapsed<<(w+s) | int64(p.WorkerID)<<s | int64(p.Sequence)
	if id == 0 {
		return 0, fmt.Errorf("%w: the parts make the ID 0", ErrInvalidID)
	}
	return id, nil
}
