package status

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/leaf-nats/leaf/snowflake"
	"github.com/leaf-nats/leaf/vending"
)

// askAgainAfter is how long a vendor whose stats request NATS refused waits
// before it asks again: the permission may be granted by a configuration
// reload, and each refusal is an ERROR in the server's log.
const askAgainAfter = time.Minute

// errPeersDenied is the answer of a peerAsker while NATS refuses its stats
// request.
var errPeersDenied = errors.New("no permission to ask the other vendors: NATS refuses this vendor's user to publish " +
	StatsSubject + "; grant it (docs/security.md, docs/nats-server.conf)")

// StatsSubject is where every vendor answers micro stats requests
// (micro.ControlSubject of the stats verb and the service's name).
const StatsSubject = "$SRV.STATS." + vending.ServiceName

// StatsAsker asks every live vendor for its stats ($SRV.STATS.leaf), the
// data `nats micro stats leaf` shows, for the status page's cluster table.
// (The vendors' safety checks ask each other on a subject of their own:
// package cluster.) A request NATS refuses is not seen by the publisher:
// the server answers it with an asynchronous error. The asker spots it,
// says so once, and does not ask again for askAgainAfter, so that neither
// log grows with each page refresh.
type StatsAsker struct {
	nc  *nats.Conn
	log *slog.Logger

	mu          sync.Mutex
	deniedUntil time.Time // zero while allowed
}

// NewStatsAsker asks on nc, which is up before the service starts and
// after it stops.
func NewStatsAsker(nc *nats.Conn, log *slog.Logger) *StatsAsker {
	return &StatsAsker{nc: nc, log: log}
}

// ask publishes a stats request and passes each reply that arrives within
// wait to each, with when it was sent and when it arrived by clock. It
// returns errPeersDenied when NATS refuses the request, now or at the last
// ask less than askAgainAfter ago.
func (a *StatsAsker) ask(ctx context.Context, wait time.Duration, clock snowflake.Clock, each func(data []byte, sent, arrived time.Time)) error {
	if a.holdingOff() {
		return errPeersDenied
	}
	inbox := a.nc.NewRespInbox()
	sub, err := a.nc.SubscribeSync(inbox)
	if err != nil {
		return err
	}
	defer sub.Unsubscribe()
	before := a.nc.LastError()
	sent := clock.Now()
	if err := a.nc.PublishRequest(StatsSubject, inbox, nil); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for {
		msg, err := sub.NextMsgWithContext(wctx)
		if err != nil {
			break // the deadline: everyone who answers in time has
		}
		each(msg.Data, sent, clock.Now())
	}
	// The server sends its refusal of the request before the PONG of this
	// flush; the connection keeps it as its last error.
	if err := a.nc.FlushTimeout(time.Second); err != nil {
		return nil // unknown: as if allowed
	}
	if last := a.nc.LastError(); last != before && IsStatsDenial(last) {
		a.denied()
		return errPeersDenied
	}
	a.allowed()
	return nil
}

// IsStatsDenial reports whether err is the server's refusal of a stats
// request: the connection's error handler leaves it to the asker.
func IsStatsDenial(err error) bool {
	return errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), `"`+StatsSubject+`"`)
}

func (a *StatsAsker) holdingOff() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return !a.deniedUntil.IsZero() && time.Now().Before(a.deniedUntil)
}

func (a *StatsAsker) denied() {
	a.mu.Lock()
	first := a.deniedUntil.IsZero()
	a.deniedUntil = time.Now().Add(askAgainAfter)
	a.mu.Unlock()
	if first {
		a.log.Warn("NATS refuses this vendor's requests for the other vendors' stats: the status page's cluster table stays empty. Grant this vendor's NATS user publish on "+StatsSubject+" (docs/security.md)",
			"subject", StatsSubject, "ask_again_every", askAgainAfter)
	}
}

func (a *StatsAsker) allowed() {
	a.mu.Lock()
	was := !a.deniedUntil.IsZero()
	a.deniedUntil = time.Time{}
	a.mu.Unlock()
	if was {
		a.log.Info("NATS now lets this vendor ask the other vendors for their stats", "subject", StatsSubject)
	}
}

// stats returns the stats of every live vendor, this one included, that
// answer within wait.
func (a *StatsAsker) stats(ctx context.Context, wait time.Duration) ([]micro.Stats, error) {
	var out []micro.Stats
	err := a.ask(ctx, wait, snowflake.SystemClock{}, func(data []byte, _, _ time.Time) {
		var st micro.Stats
		if json.Unmarshal(data, &st) == nil {
			out = append(out, st)
		}
	})
	return out, err
}

// serveCluster is /cluster.json: every vendor of the cluster, or 403 with
// the reason when NATS refuses to let this vendor ask.
func (a *StatsAsker) serveCluster(rw http.ResponseWriter, r *http.Request) {
	stats, err := a.stats(r.Context(), 300*time.Millisecond)
	switch {
	case errors.Is(err, errPeersDenied):
		http.Error(rw, err.Error(), http.StatusForbidden)
		return
	case err != nil:
		http.Error(rw, fmt.Sprintf("cannot ask the other vendors: %v", err), http.StatusBadGateway)
		return
	}
	writeJSON(rw, clusterView(stats))
}

// ClusterEntry is one vendor on the status page's cluster table.
type ClusterEntry struct {
	ID        string      `json:"id"`
	Requests  int         `json:"requests"`
	Errors    int         `json:"errors"`
	AverageNs int64       `json:"average_ns"`
	Data      ClusterData `json:"data"`
}

// ClusterData is what a vendor's micro stats tell of it.
type ClusterData struct {
	Instance string       `json:"instance"`
	Ready    bool         `json:"ready"`
	Worker   WorkerStatus `json:"worker"`
	// Tags are the tags it serves, the most recently loaded StatsTags of
	// them when there are more; TagsTotal counts them all.
	Tags      []string `json:"tags"`
	TagsTotal int      `json:"tags_total"`
}

// clusterView condenses the micro stats replies of every vendor.
func clusterView(stats []micro.Stats) []ClusterEntry {
	out := make([]ClusterEntry, 0, len(stats))
	for _, st := range stats {
		e := ClusterEntry{ID: st.ID}
		var took time.Duration
		var counted *int64 // the vendor's own count of its errors, if it tells it
		for _, ep := range st.Endpoints {
			e.Errors += ep.NumErrors
			e.Requests += ep.NumRequests
			took += ep.ProcessingTime
			var sum struct {
				Service struct {
					Errors *int64 `json:"errors"`
				} `json:"service"`
			}
			if len(ep.Data) > 0 && json.Unmarshal(ep.Data, &sum) == nil && sum.Service.Errors != nil {
				counted = sum.Service.Errors
			}
			var s Status
			if len(ep.Data) > 0 && json.Unmarshal(ep.Data, &s) == nil && s.Instance != "" {
				e.Data = ClusterData{Instance: s.Instance, Ready: s.Ready, Worker: s.Worker, TagsTotal: s.Segments.TagsTotal}
				for _, t := range s.Segments.Tags {
					e.Data.Tags = append(e.Data.Tags, t.Tag)
				}
			}
		}
		if counted != nil {
			e.Errors = int(*counted) // micro's leave out errors answered late
		}
		if e.Requests > 0 {
			e.AverageNs = int64(took) / int64(e.Requests)
		}
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b ClusterEntry) int { return strings.Compare(a.Data.Instance, b.Data.Instance) })
	return out
}
