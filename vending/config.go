package vending

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/leaf-nats/leaf/ids"
	"github.com/leaf-nats/leaf/segment"
	"github.com/leaf-nats/leaf/snowflake"
)

// ValidatePrefix checks a subject prefix: literal subject tokens (letters,
// digits, '_', '-', separated by single dots), as a tag is.
func ValidatePrefix(prefix string) error {
	if err := segment.ValidateTag(prefix); err != nil {
		return fmt.Errorf("subject prefix %q: use literal tokens of letters, digits, '_' and '-', separated by dots (such as leaf or ids.eu)", prefix)
	}
	return nil
}

// Snowflake is the source of snowflake IDs (workerid.Keeper, or a
// snowflake.Generator): n IDs as runs, one per millisecond.
type Snowflake interface {
	NextRanges(dst []ids.Range, n int) ([]ids.Range, error)
}

// Segments is the source of segment IDs: strict.Segments, which serves a
// strict tag through its leader.
type Segments interface {
	// TryTakeRanges serves n IDs of tag from memory as at most a few
	// runs, or reports (ok false) that it would wait.
	TryTakeRanges(tag string, dst []ids.Range, n int64) (rs []ids.Range, ok bool, err error)
	// TakeRanges serves them, waiting for the store (or the tag's
	// leader) as long as ctx lets it.
	TakeRanges(ctx context.Context, tag string, dst []ids.Range, n int64) ([]ids.Range, error)
	// IsStrict reports whether tag is strict: its replies say so, so that
	// a client does not buffer its IDs.
	IsStrict(tag string) bool
	// HandOff gives a request of tag, which could not be served from
	// memory, to the vendor that serves it (a strict tag's leader), which
	// answers the client itself; false when it did not, and the service
	// serves it with TakeRanges.
	HandOff(tag string, r Handing) bool
	// Leans reports whether this vendor serves tag's requests for other
	// vendors too (a strict tag's leader they pass requests to): then it
	// takes most of them directly (LeanWeight).
	Leans(tag string) bool
}

// Region is a vendor's region: its name and number.
type Region struct {
	Name string
	ID   int
}

// Handing is a request the service hands off: the client's reply subject
// (one the service answers), the request's body and the encoding it asked
// for.
type Handing struct {
	Reply, Encoding string
	Body            []byte
}

// Config configures a Service. The zero value of every field means its
// default (see ClientConfig for why configuration reads this way); Start
// checks the whole struct.
type Config struct {
	// Prefix of the subjects. Default "leaf".
	Prefix string
	// QueueGroup the workers share. Default "leaf".
	QueueGroup string
	// MaxBatch is the largest count one request may ask for, in the text
	// and binary encodings and for snowflake IDs in any. Default 10000.
	MaxBatch int
	// MaxRangeBatch is the largest count of segment IDs one request may ask
	// for in the ranges encoding, whose reply is a few bytes whatever the
	// count: a batch larger than a segment is allocated from the store
	// for itself. Default 1,000,000,000.
	MaxRangeBatch int
	// Version the service reports. Default "0.1.0".
	Version string
	// Snowflake serves <prefix>.snowflake when set.
	Snowflake Snowflake
	// Epoch of the snowflake IDs, for <prefix>.snowflake.decode. Default
	// snowflake.DefaultEpoch.
	Epoch int64
	// Layout of the snowflake IDs, for <prefix>.snowflake.decode and the
	// service metadata (MetaLayout). The zero value is the default layout.
	Layout snowflake.Layout
	// Region is the vendor's region (LEAF_REGION, LEAF_REGION_ID): decode
	// says which region made an ID. The zero value is no region.
	Region Region
	// Segments serves <prefix>.segment.<tag> when set. It bounds how long a
	// request waits for its store itself (segment.Options.Wait).
	Segments Segments
	// Stats, when set, gives the data of each endpoint's stats in the
	// service's stats replies ($SRV.STATS.leaf), by endpoint name.
	Stats func(endpoint string) any
	// Metadata is added to the service's own (`nats micro info leaf`).
	Metadata map[string]string
	// Observer, when set, is told about every request.
	Observer Observer
	// ReplyPrefixes are the reply subjects the service answers: inboxes.
	// A request with any other reply subject is dropped unanswered, with
	// no ID taken (see replyGuard). Default DefaultReplyPrefixes.
	ReplyPrefixes []string
	// OwnInboxes are more prefixes never answered although they are under
	// a reply prefix: the inboxes on which the caller's JetStream requests
	// wait for their acks, which must not read a forged reply
	// (RequestInbox of that connection).
	OwnInboxes []string
	// RequesterRateLimit bounds the IDs a second one requester (Requester)
	// is handed by this vendor, in both modes, up to RequesterRateBurst at
	// once (default: a second of it): beyond them a request is answered
	// 429. 0: no bound.
	RequesterRateLimit float64
	RequesterRateBurst int
	// Readiness, when set, says which modes the vendor can serve: the
	// service leaves the queue group of one it has not been able to serve
	// for LeaveAfter, so that NATS sends its requests to vendors that can
	// (in a supercluster, in another region), and joins it again once it
	// can. Nil: it answers every mode, 503 when it cannot.
	Readiness Readiness
	// Logger receives subscription errors and internal errors. Default:
	// discard.
	Logger *slog.Logger
}

func (c Config) withDefaults() (Config, error) {
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if c.QueueGroup == "" {
		c.QueueGroup = DefaultQueueGroup
	}
	if c.MaxBatch == 0 {
		c.MaxBatch = DefaultMaxBatch
	}
	if c.MaxRangeBatch == 0 {
		c.MaxRangeBatch = max(DefaultMaxRangeBatch, c.MaxBatch)
	}
	if c.Version == "" {
		c.Version = "0.1.0"
	}
	if c.Epoch == 0 {
		c.Epoch = snowflake.DefaultEpoch
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Observer == nil {
		c.Observer = noObserver{}
	}
	if len(c.ReplyPrefixes) == 0 {
		c.ReplyPrefixes = DefaultReplyPrefixes
	}
	var errs []error
	for _, p := range c.ReplyPrefixes {
		if err := CheckReplyPrefix(p, c.Prefix); err != nil {
			errs = append(errs, err)
		}
	}
	if c.RequesterRateLimit < 0 || c.RequesterRateBurst < 0 {
		errs = append(errs, fmt.Errorf("requester rate limit %g and burst %d: want 0 (none) or more", c.RequesterRateLimit, c.RequesterRateBurst))
	}
	if c.MaxBatch < 1 {
		errs = append(errs, fmt.Errorf("max batch %d must be at least 1", c.MaxBatch))
	}
	if c.MaxRangeBatch < c.MaxBatch {
		errs = append(errs, fmt.Errorf("max range batch %d must be at least the max batch %d", c.MaxRangeBatch, c.MaxBatch))
	}
	if err := ValidatePrefix(c.Prefix); err != nil {
		errs = append(errs, err)
	}
	if c.Snowflake == nil && c.Segments == nil {
		errs = append(errs, errors.New("nothing to serve: neither snowflake nor segments configured"))
	}
	if err := errors.Join(errs...); err != nil {
		return c, fmt.Errorf("vending: %w", err)
	}
	return c, nil
}

// Request kinds, as Observer sees them.
const (
	ModeSnowflake = "snowflake"
	ModeSegment   = "segment"
	ModeDecode    = "decode"
)

// CodeOK is the code Observer sees for a request answered with IDs.
const CodeOK = 200

// Observer is told about every request, for metrics; it is called on the hot
// path, so it must be cheap. tag is empty except for valid segment tags.
type Observer interface {
	Observe(mode, tag string, code, ids int, took time.Duration)
	// Dropped is told of a request dropped unanswered, and why: its reply
	// subject is not one a vendor answers.
	Dropped(mode, why string)
}

type noObserver struct{}

func (noObserver) Observe(string, string, int, int, time.Duration) {}
func (noObserver) Dropped(string, string)                          {}
