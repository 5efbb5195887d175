// Package snowflake generates and decodes Leaf-snowflake IDs.
//
// An ID is a positive int64 laid out as
//
//	0 | 41 bits: milliseconds since the epoch | 10 bits: worker ID | 12 bits: sequence
//
// in LayoutDefault, or below 2^53, so that a JavaScript number holds it, in
// LayoutJS53 (Settings.Layout; Layout.Decode reads either):
//
//	11 zero bits | 41 bits: milliseconds since the epoch | 4 bits: worker ID | 8 bits: sequence
//
// Uniqueness rests on two things the caller provides: a worker ID that no
// other generator holds at the same time, and a clock. The generator is pure:
// it knows nothing of NATS or of how the worker ID was obtained. The clock is
// injected (Settings.Clock), so tests drive time.
//
// Three rules keep IDs unique when time misbehaves:
//
//   - a backwards clock step of up to Settings.MaxBackward is waited out; a
//     larger one returns ErrClockBackwards until the clock catches up;
//   - Settings.Last makes a new generator start strictly after the last
//     millisecond a previous holder of the same worker ID may have used;
//   - Window limits vending to a lease: after the window's deadline, or for
//     milliseconds past it, the generator returns ErrNoLease. The holder of a
//     worker-ID lease reports that deadline as the worker ID's last
//     timestamp, so the next holder starts after it.
package snowflake
