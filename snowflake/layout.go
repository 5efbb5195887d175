package snowflake

import (
	"fmt"
	"strings"
	"time"
)

// Layout is how an ID's 64 bits are split. The zero value is LayoutDefault.
type Layout uint8

const (
	// LayoutDefault is Leaf's and Twitter's split:
	//
	//	0 | 41 bits: ms since the epoch | 10 bits: worker ID | 12 bits: sequence
	//
	// 1024 worker IDs, 4,096,000 IDs a second each, 69.7 years.
	LayoutDefault Layout = iota
	// LayoutJS53 keeps every ID below 2^53, so that a JavaScript number
	// (a float64) holds it exactly:
	//
	//	11 zero bits | 41 bits: ms since the epoch | 4 bits: worker ID | 8 bits: sequence
	//
	// It keeps the default's time bits, so the epoch and its end are the
	// same (69.7 years), and gives up worker IDs (16) and IDs per second
	// per worker (256,000) instead.
	LayoutJS53
)

// bits of each layout: time, worker ID, sequence.
func (l Layout) bits() (t, w, s int) {
	if l == LayoutJS53 {
		return 41, 4, 8
	}
	return TimeBits, WorkerBits, SequenceBits
}

// TimeBits is the number of bits of milliseconds since the epoch.
func (l Layout) TimeBits() int { t, _, _ := l.bits(); return t }

// WorkerBits is the number of bits of the worker ID.
func (l Layout) WorkerBits() int { _, w, _ := l.bits(); return w }

// SequenceBits is the number of bits of the sequence.
func (l Layout) SequenceBits() int { _, _, s := l.bits(); return s }

// MaxWorkerID is the largest worker ID the layout holds.
func (l Layout) MaxWorkerID() int { return 1<<l.WorkerBits() - 1 }

// MaxSequence is the largest sequence the layout holds.
func (l Layout) MaxSequence() int { return 1<<l.SequenceBits() - 1 }

// MaxElapsed is the last millisecond after the epoch the time bits hold.
func (l Layout) MaxElapsed() int64 { return 1<<l.TimeBits() - 1 }

// Ends is the first time the layout's time bits cannot hold after epoch
// (Unix ms): from then on the generator returns ErrTimeOverflow.
func (l Layout) Ends(epoch int64) time.Time {
	return time.UnixMilli(epoch + l.MaxElapsed() + 1).UTC()
}

// Name is the layout's name in LEAF_SNOWFLAKE_LAYOUT: "default" or "js53".
func (l Layout) Name() string {
	if l == LayoutJS53 {
		return "js53"
	}
	return "default"
}

// String is the bit split, high bits first, as the cluster contract
// records it: the unused high bits (the sign bit among them), then time,
// worker ID and sequence, adding up to 64. "1+41+10+12" or "11+41+4+8".
func (l Layout) String() string {
	t, w, s := l.bits()
	return fmt.Sprintf("%d+%d+%d+%d", 64-t-w-s, t, w, s)
}

// Layouts lists every layout the generator supports.
func Layouts() []Layout { return []Layout{LayoutDefault, LayoutJS53} }

// ParseLayout reads a layout's name or its bit split (Layout.String);
// the empty string is the default.
func ParseLayout(s string) (Layout, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return LayoutDefault, nil
	}
	for _, l := range Layouts() {
		if strings.EqualFold(s, l.Name()) || s == l.String() {
			return l, nil
		}
	}
	return 0, fmt.Errorf("snowflake: unknown layout %q: want default (%s) or js53 (%s, IDs below 2^53)",
		s, LayoutDefault, LayoutJS53)
}
