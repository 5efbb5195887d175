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
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/leaf-nats/leaf/internal/scatter"
	"github.com/leaf-nats/leaf/vending"
)

// StatsSubject is where every vendor answers micro stats requests
// (micro.ControlSubject of the stats verb and the service's name).
const StatsSubject = "$SRV.STATS." + vending.ServiceName

// StatsAsker asks every live vendor for its stats ($SRV.STATS.leaf), the
// data `nats micro stats leaf` shows, for the status page's cluster table.
// (The vendors' safety checks ask each other on a subject of their own:
// package cluster.) While NATS refuses the request it says so once and
// asks no more for a while (scatter.Asker), so that neither log grows with
// each page refresh.
type StatsAsker struct {
	ask *scatter.Asker
}

// NewStatsAsker asks on nc, which is up before the service starts and
// after it stops.
func NewStatsAsker(nc *nats.Conn, log *slog.Logger) *StatsAsker {
	return &StatsAsker{ask: scatter.NewAsker(scatter.AskerConfig{Conn: nc, Subject: StatsSubject,
		What: "requests for the other vendors' stats", Lost: "the status page's cluster table stays empty", Logger: log})}
}

// stats returns the stats of every live vendor, this one included, that
// answer within wait.
func (a *StatsAsker) stats(ctx context.Context, wait time.Duration) ([]micro.Stats, error) {
	var out []micro.Stats
	err := a.ask.Ask(ctx, scatter.Question{Wait: wait}, func(ans scatter.Answer) {
		var st micro.Stats
		if json.Unmarshal(ans.Data, &st) == nil {
			out = append(out, st)
		}
	})
	return out, err
}

// clusterAnswer is /cluster.json: every vendor of the cluster, or 403 with
// the reason when NATS refuses to let this vendor ask. Each costs the NATS
// traffic of every vendor's stats: it is shared (Server.Serve), never
// asked per reader.
func (a *StatsAsker) clusterAnswer() answer {
	stats, err := a.stats(context.Background(), 300*time.Millisecond)
	switch {
	case errors.Is(err, scatter.ErrRefused):
		return textAnswer(http.StatusForbidden, err.Error())
	case err != nil:
		return textAnswer(http.StatusBadGateway, fmt.Sprintf("cannot ask the other vendors: %v", err))
	}
	return jsonAnswer(clusterView(stats))
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
		var sum *serviceSummary
		for _, ep := range st.Endpoints {
			e.Errors += ep.NumErrors
			e.Requests += ep.NumRequests
			took += ep.ProcessingTime
			var s struct {
				Status
				Service *serviceSummary `json:"service"`
			}
			if len(ep.Data) > 0 && json.Unmarshal(ep.Data, &s) == nil && s.Instance != "" {
				e.Data = ClusterData{Instance: s.Instance, Ready: s.Ready, Worker: s.Worker, TagsTotal: s.Segments.TagsTotal}
				for _, t := range s.Segments.Tags {
					e.Data.Tags = append(e.Data.Tags, t.Tag)
				}
				sum = s.Service
			}
		}
		if sum != nil && sum.Answered > 0 {
			// The vendor's own counts: micro's miss the errors of requests
			// answered after they waited.
			e.Requests, e.Errors = int(sum.Answered), int(sum.Errors)
		}
		if e.Requests > 0 {
			e.AverageNs = int64(took) / int64(e.Requests)
		}
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b ClusterEntry) int { return strings.Compare(a.Data.Instance, b.Data.Instance) })
	return out
}
