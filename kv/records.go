package kv

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Every value read back from a bucket is decoded here and checked before it
// is believed. Anyone who may publish to a bucket's subjects (an operator's
// mistake, a misconfigured user, a reply sent where it should not go) can
// write any bytes there; a record that does not parse, or holds values no
// vendor writes, is an error that names it, never a zero value: a row of
// zeros would restart a tag at 0, a contract of zeros stop every vendor.

// ErrCorrupt is wrapped by every read of a record that does not parse or
// holds values no vendor writes.
var ErrCorrupt = errors.New("kv: corrupt record")

// CorruptError is a record that cannot be believed: which, where, what it
// holds, why not, and what to do.
type CorruptError struct {
	Bucket, Key string
	Revision    uint64
	Value       []byte
	Why         string
	Fix         string // a sentence; empty when there is nothing to add
}

func (e *CorruptError) Error() string {
	msg := fmt.Sprintf("kv: key %s of bucket %s (revision %d) is corrupt: %s; it holds %s", e.Key, e.Bucket, e.Revision, e.Why, shown(e.Value))
	if e.Fix != "" {
		msg += ". " + e.Fix
	}
	return msg
}

func (e *CorruptError) Unwrap() error { return ErrCorrupt }

// shown quotes a value for a message, cut to a readable length.
func shown(v []byte) string {
	const most = 96
	if len(v) > most {
		return strconv.Quote(string(v[:most])) + fmt.Sprintf("... (%d bytes)", len(v))
	}
	return strconv.Quote(string(v))
}

// Corrupt makes the CorruptError of a record that failed to decode.
func Corrupt(bucket, key string, rev uint64, v []byte, err error, fix string) *CorruptError {
	return &CorruptError{Bucket: bucket, Key: key, Revision: rev, Value: v, Why: err.Error(), Fix: fix}
}

// DecodeJSON decodes a record v into dst, refusing trailing data.
func DecodeJSON(v []byte, dst any) error {
	dec := json.NewDecoder(strings.NewReader(string(v)))
	if err := dec.Decode(dst); err != nil {
		return fmt.Errorf("not the JSON a vendor writes (%v)", err)
	}
	if dec.More() {
		return errors.New("more than one JSON value")
	}
	return nil
}

// maxClockMs bounds a recorded last timestamp: 2^43 ms after 1970 is the
// year 2248, past the 41 time bits of any epoch a vendor accepts.
const maxClockMs = 1 << 43

// ParseClock reads a value of the clocks bucket: the last Unix ms a holder
// of the worker ID may have used and that holder's snowflake epoch, as
// "<ms> <epoch>"; a value of only "<ms>" (written by hand) has epoch 0,
// unknown. A value outside what any vendor writes is an error.
func ParseClock(v []byte) (ms, epoch int64, err error) {
	a, b, two := strings.Cut(strings.TrimSpace(string(v)), " ")
	if ms, err = strconv.ParseInt(a, 10, 64); err != nil {
		return 0, 0, errors.New(`want "<last Unix ms> <epoch ms>"`)
	}
	if two {
		if epoch, err = strconv.ParseInt(b, 10, 64); err != nil {
			return 0, 0, errors.New(`want "<last Unix ms> <epoch ms>"`)
		}
	}
	switch {
	case ms < 0 || epoch < 0:
		return 0, 0, errors.New("a negative time")
	case ms >= maxClockMs || epoch >= maxClockMs:
		return 0, 0, fmt.Errorf("%d ms is past the year 2248, beyond the time bits of any epoch", max(ms, epoch))
	}
	return ms, epoch, nil
}

// decodeContract reads the cluster contract and checks each term.
func decodeContract(v []byte) (Contract, error) {
	var c Contract
	if err := DecodeJSON(v, &c); err != nil {
		return Contract{}, err
	}
	var errs []error
	if c.Epoch <= 0 || c.Epoch >= maxClockMs {
		errs = append(errs, fmt.Errorf("epoch %d is no Unix ms", c.Epoch))
	}
	if !validLayout(c.Layout) {
		errs = append(errs, fmt.Errorf("layout %q is not <unused bits>+<time bits>+<worker bits>+<sequence bits> adding up to 64", c.Layout))
	}
	if first, last, ok := parseIDRange(c.WorkerIDs); !ok || first < 0 || last > 1023 || first > last {
		errs = append(errs, fmt.Errorf("worker IDs %q are not a range first-last within 0-1023", c.WorkerIDs))
	}
	if kind, id, ok := strings.Cut(c.Segments, ":"); c.Segments != "" && (!ok || kind == "" || id == "") {
		errs = append(errs, fmt.Errorf("segment store %q is not <kind>:<id>", c.Segments))
	}
	if name, id, ok := strings.Cut(c.Region, "/"); c.Region != "" && (!ok || !validRegionName(name) || !validRegionID(id)) {
		errs = append(errs, fmt.Errorf("region %q is not <name>/<id 0-7>", c.Region))
	}
	if c.LeaseTTL < 0 || c.LeaseTTL > 24*time.Hour {
		errs = append(errs, fmt.Errorf("lease TTL %v is not within 0..24h", c.LeaseTTL))
	}
	return c, errors.Join(errs...)
}

// validRegionName reports whether name can be a region's (LEAF_REGION):
// 1 to 32 letters, digits, '_' and '-', as bucket names take them.
func validRegionName(name string) bool {
	if name == "" || len(name) > 32 {
		return false
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// validRegionID reports whether id is a region's number, 0 to 7.
func validRegionID(id string) bool {
	return len(id) == 1 && id[0] >= '0' && id[0] <= '7'
}

// validLayout reports whether l reads "u+t+w+s", unused high bits (the sign
// bit among them) then time, worker and sequence bits, adding up to 64:
// "1+41+10+12", or "11+41+4+8" for IDs below 2^53.
func validLayout(l string) bool {
	parts := strings.Split(l, "+")
	if len(parts) != 4 {
		return false
	}
	sum := 0
	for _, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 62 || strconv.Itoa(n) != p {
			return false
		}
		sum += n
	}
	return sum == 64
}

// parseIDRange reads "first-last".
func parseIDRange(s string) (first, last int, ok bool) {
	a, b, found := strings.Cut(s, "-")
	first, ferr := strconv.Atoi(a)
	last, lerr := strconv.Atoi(b)
	return first, last, found && ferr == nil && lerr == nil
}

// decodeLeaseValue reads a worker-ID lease's value.
func decodeLeaseValue(v []byte) (leaseValue, error) {
	var l leaseValue
	if err := DecodeJSON(v, &l); err != nil {
		return leaseValue{}, err
	}
	if l.Holder == "" || l.Claimed.IsZero() {
		return leaseValue{}, errors.New("no holder, or no time of claim")
	}
	return l, nil
}

// decodeLeadValue reads a strict tag's lead's value.
func decodeLeadValue(v []byte) (leadValue, error) {
	var l leadValue
	if err := DecodeJSON(v, &l); err != nil {
		return leadValue{}, err
	}
	if l.Holder == "" || l.Since.IsZero() {
		return leadValue{}, errors.New("no holder, or no time the lead was taken")
	}
	return l, nil
}
