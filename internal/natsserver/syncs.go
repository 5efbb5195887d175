package natsserver

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
)

// VarzSubject asks every server of a cluster for its settings; only users
// of the system account get answers.
const VarzSubject = "$SYS.REQ.SERVER.PING.VARZ"

// Sync is how a server writes JetStream to disk.
type Sync struct {
	Server string
	// JetStream: the server runs JetStream (one that does not keeps no
	// stream data).
	JetStream bool
	// Always: every write is synced before it is acknowledged
	// (sync_interval: always). Otherwise acknowledged writes of the last
	// Interval are lost when the machine loses power.
	Always   bool
	Interval time.Duration
}

// ErrNotVisible is returned by Syncs when no server answers: the connection's
// account is not the system account, which is the usual case.
var ErrNotVisible = errors.New("the NATS servers' settings are visible to the system account only")

// Syncs asks the servers nc reaches how they sync JetStream, collecting the
// answers that arrive within wait.
func Syncs(nc *nats.Conn, wait time.Duration) ([]Sync, error) {
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return nil, err
	}
	defer sub.Unsubscribe()
	msg := nats.NewMsg(VarzSubject)
	msg.Reply = inbox
	if err := nc.PublishMsg(msg); err != nil {
		return nil, err
	}
	var out []Sync
	deadline := time.Now().Add(wait)
	for {
		m, err := sub.NextMsg(time.Until(deadline))
		switch {
		case errors.Is(err, nats.ErrTimeout), errors.Is(err, nats.ErrNoResponders):
			if len(out) == 0 {
				return nil, ErrNotVisible
			}
			return out, nil
		case err != nil:
			return out, err
		}
		s, err := parseVarz(m.Data)
		if err != nil {
			return out, err
		}
		out = append(out, s)
	}
}

func parseVarz(data []byte) (Sync, error) {
	var r struct {
		Server struct {
			Name string `json:"name"`
		} `json:"server"`
		Data struct {
			JetStream struct {
				Config *struct {
					SyncInterval time.Duration `json:"sync_interval"`
					SyncAlways   bool          `json:"sync_always"`
				} `json:"config"`
			} `json:"jetstream"`
		} `json:"data"`
		Error *struct {
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return Sync{}, fmt.Errorf("a server's VARZ answer: %w", err)
	}
	if r.Error != nil {
		return Sync{}, fmt.Errorf("server %s: %s", r.Server.Name, r.Error.Description)
	}
	s := Sync{Server: r.Server.Name}
	if c := r.Data.JetStream.Config; c != nil {
		s.JetStream, s.Always, s.Interval = true, c.SyncAlways, c.SyncInterval
	}
	return s, nil
}
