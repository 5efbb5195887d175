package cluster

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/leaf-nats/leaf/kv"
	"github.com/leaf-nats/leaf/snowflake"
)

// Store kinds, as the contract names a segment store: "<kind>:<identity>".
const (
	KindPostgres = "postgres"
	KindKV       = "jetstream-kv"
)

// NamesKind reports whether a contract's segment store (name) is of kind.
func NamesKind(name, kind string) bool { return strings.HasPrefix(name, kind+":") }

// Terms are what vendors sharing NATS must agree on for IDs to be unique:
// the snowflake epoch and layout, the worker IDs they claim, and the
// segment store that serves the segment subjects ("" while unknown).
type Terms struct {
	Epoch     int64  `json:"epoch"`
	Layout    string `json:"layout"`
	WorkerIDs string `json:"worker_ids"`
	Segments  string `json:"segments,omitempty"`
	// Region is "<name>/<id>" (LEAF_REGION, LEAF_REGION_ID), "" with none.
	Region string `json:"region,omitempty"`
}

// Contract returns t as a contract recorded by by, with the longest lease
// TTL a vendor of the cluster may hold.
func (t Terms) Contract(leaseTTL time.Duration, by string, at time.Time) kv.Contract {
	return kv.Contract{Epoch: t.Epoch, Layout: t.Layout, WorkerIDs: t.WorkerIDs, Segments: t.Segments, Region: t.Region,
		LeaseTTL: leaseTTL, By: by, At: at.UTC()}
}

// TermsOf returns the terms of a recorded contract.
func TermsOf(c kv.Contract) Terms {
	return Terms{Epoch: c.Epoch, Layout: c.Layout, WorkerIDs: c.WorkerIDs, Segments: c.Segments, Region: c.Region}
}

// MismatchError is a recorded contract a vendor's terms disagree with: it
// names each term, both values and the setting to change.
type MismatchError struct {
	Recorded kv.Contract
	Diffs    []kv.Difference
	// Rerecorded: the contract this vendor had checked was lost, and
	// another vendor recorded its own terms since.
	Rerecorded bool
}

// mismatchFix is what a person does about a *MismatchError as a whole.
const mismatchFix = "vendor cluster show prints the contract; vendor cluster -h lists how to change it"

func (e *MismatchError) Error() string {
	return e.headline() + ":" + e.Terms() + "\n(" + mismatchFix + ")"
}

// headline says what disagrees with what, in one sentence.
func (e *MismatchError) headline() string {
	if e.Rerecorded {
		return fmt.Sprintf("the cluster contract in KV bucket %s was lost and recorded again by %s at %s, with settings that differ from the ones this vendor vended by; "+
			"one of the two vendors is misconfigured, and this one stops so that IDs cannot repeat",
			kv.NamesOf(e.Recorded.Region).Cluster, e.Recorded.By, e.Recorded.At.Format(time.RFC3339))
	}
	return fmt.Sprintf("this vendor's settings differ from the cluster contract in KV bucket %s (recorded by %s at %s); vendors sharing a NATS cluster must agree on it, or IDs repeat",
		kv.NamesOf(e.Recorded.Region).Cluster, e.Recorded.By, e.Recorded.At.Format(time.RFC3339))
}

// Terms lists each differing term, both values and the fix, a line each.
func (e *MismatchError) Terms() string {
	var b strings.Builder
	for _, d := range e.Diffs {
		fmt.Fprintf(&b, "\n  %s: %s", d.Term, e.termText(d))
	}
	return b.String()
}

// termText is one differing term's values and fix.
func (e *MismatchError) termText(d kv.Difference) string {
	fix := fixOf(d, kv.NamesOf(e.Recorded.Region))
	if d.Term == "worker IDs" && slices.ContainsFunc(e.Diffs, func(d kv.Difference) bool { return d.Term == "layout" }) {
		// The cluster's worker IDs cannot be changed to ones of another
		// layout: this vendor follows the cluster's.
		fix = "set LEAF_WORKER_ID_RANGE=" + d.Recorded + " (or unset it with the cluster's layout)"
	}
	return fmt.Sprintf("the cluster's is %s, this vendor's %s; %s", d.Recorded, d.Wanted, fix)
}

// LogValue is the error as log fields, so that a log line reads as one
// line: the headline, a field per differing term (epoch, worker_ids, ...) and the
// hint. Error() is lines, for a terminal.
func (e *MismatchError) LogValue() slog.Value {
	attrs := []slog.Attr{slog.String("problem", e.headline())}
	for _, d := range e.Diffs {
		attrs = append(attrs, slog.String(strings.ReplaceAll(strings.ToLower(d.Term), " ", "_"), e.termText(d)))
	}
	return slog.GroupValue(append(attrs, slog.String("hint", mismatchFix))...)
}

var _ slog.LogValuer = (*MismatchError)(nil)

// ErrAttr is err as the log field "err": one with a *MismatchError in it
// becomes that error's fields (LogValue) and, under "while", what it was
// wrapped in, so that no log line carries the error's line breaks.
func ErrAttr(err error) slog.Attr {
	var m *MismatchError
	if !errors.As(err, &m) {
		return slog.Any("err", err)
	}
	attrs := m.LogValue().Group()
	if while := strings.TrimSuffix(strings.TrimSuffix(err.Error(), m.Error()), ": "); while != "" {
		attrs = append(attrs, slog.String("while", while))
	}
	return slog.Attr{Key: "err", Value: slog.GroupValue(attrs...)}
}

// fixOf says what to set for a term.
func fixOf(d kv.Difference, names kv.Names) string {
	switch d.Term {
	case "epoch":
		return "set LEAF_EPOCH=" + d.Recorded
	case "layout":
		if l, err := snowflake.ParseLayout(d.Recorded); err == nil {
			return "set LEAF_SNOWFLAKE_LAYOUT=" + l.Name()
		}
		return "this build of leaf-nats cannot vend in the cluster's layout " + d.Recorded + " (LEAF_SNOWFLAKE_LAYOUT takes default or js53)"
	case "worker IDs":
		return "set LEAF_WORKER_ID_RANGE=" + d.Recorded + ", or change the cluster's with: vendor cluster set -worker-ids " + d.Wanted
	case "segment store":
		kind, _, _ := strings.Cut(d.Recorded, ":")
		if kind == KindPostgres {
			return "set LEAF_POSTGRES_URL to the cluster's database, or move the cluster's segments to this vendor's store with: vendor cluster move-segments"
		}
		return "leave LEAF_POSTGRES_URL empty (the cluster's segments are in KV bucket " + names.Segments + "), or move them to this vendor's store with: vendor cluster move-segments"
	case "region":
		return regionFix(d)
	}
	return "this build of leaf-nats cannot join this cluster"
}

// regionFix says what to set for the region: a region is one NATS cluster
// with its own state, so a vendor of another region is pointed at the
// wrong NATS, or misconfigured.
func regionFix(d kv.Difference) string {
	if d.Recorded == "" {
		return "this NATS cluster has no region: unset LEAF_REGION and LEAF_REGION_ID, or connect to your region's own NATS cluster (docs/regions.md)"
	}
	name, id, _ := strings.Cut(d.Recorded, "/")
	return "set LEAF_REGION=" + name + " LEAF_REGION_ID=" + id + ", or connect to your region's own NATS cluster (each region keeps its state in its own; docs/regions.md)"
}

// Check compares want with the recorded contract rec, ignoring the segment
// store while either does not know it: a *MismatchError when they differ.
func Check(rec kv.Contract, want Terms) error {
	w := want.Contract(0, "", time.Time{})
	if want.Segments == "" || rec.Segments == "" {
		rec.Segments, w.Segments = "", ""
	}
	if diffs := rec.Diff(w); len(diffs) > 0 {
		return &MismatchError{Recorded: rec, Diffs: diffs}
	}
	return nil
}
