package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leaf-nats/leaf/internal/inflight"
	"github.com/leaf-nats/leaf/internal/scatter"
	"github.com/leaf-nats/leaf/kv"
	"github.com/leaf-nats/leaf/segment"
	"github.com/leaf-nats/leaf/snowflake"
	"github.com/leaf-nats/leaf/vending"
)

// MarksSubject is where every vendor answers how far it handed a tag out:
// <prefix>.peers.mark, the body a tag. Only vendors publish there.
func MarksSubject(prefix string) string { return prefix + ".peers.mark" }

// ReturnedSubject is where a vendor tells the others of IDs it gave back
// to the store at a clean stop (segment.Lowerer): <prefix>.peers.returned,
// the body a returnedNote. Only vendors publish there.
func ReturnedSubject(prefix string) string { return prefix + ".peers.returned" }

// returnedNote says that tag's IDs [To, From) went back to the store: a
// vendor that knows From as the tag's mark (it asked this one) lowers it,
// so that its next allocation does not read the store as gone back.
type returnedNote struct {
	Instance string `json:"instance"`
	Tag      string `json:"tag"`
	From     int64  `json:"from"`
	To       int64  `json:"to"`
}

// PeerMarks are the marks (segment.Marks) of a KV segment store. That store
// lives in the JetStream that holds everything else, so a NATS store put
// back from a copy, or one that lost the writes it had not synced, takes any
// marks kept there back with it. So the marks are kept in the vendors: each
// knows how far it allocated each tag. Every allocation asks the other
// vendors for their marks of its tag (a store rewritten live gives no
// sign), and a store found below them is raised above them. A vendor that
// cannot be sure the store is as it left it (after it starts, and after it
// reconnects to a single server, which may be one restored) waits for every
// vendor that holds a worker ID (those are alive) to answer; once sure
// (see survey), it allocates without one that stops answering.
//
// A vendor that holds a worker ID but does not answer for TrustAfter
// (it runs a version from before the exchange, or NATS refuses it the
// subject) is logged and allocated without: a restored store repeats the
// IDs only such a vendor handed out.
type PeerMarks struct {
	cfg      PeerMarksConfig
	asker    *scatter.Asker
	sub      *nats.Subscription
	returned *nats.Subscription
	replies  *vending.Replies

	mu          sync.Mutex
	own         map[string]int64 // how far each tag was handed out, as this vendor knows
	sure        bool             // sure of the store since the fence (see survey)
	fenced      uint64           // the fence's value sure is sure at
	unsureSince time.Time        // since when the tags are unsure again
	warned      map[string]bool
	// pending holds, per tag, the ends this vendor's allocations recorded
	// and have not settled: answers wait for them (settled is closed and
	// replaced at each settle), so that no answer misses a segment the
	// store holds already.
	pending map[string][]int64
	settled chan struct{}
	// silent are the holders that did not answer the last question: once
	// sure of the store, a question does not wait for them (a vendor killed
	// holds its worker ID until its lease expires).
	silent map[string]bool
	// holderList is the worker IDs' holders as read at holdersAt.
	holderList map[int]string
	holdersAt  time.Time

	inFlight inflight.Group // the callbacks a close waits for (Unsubscribe does not)
}

// PeerMarksConfig configures PeerMarks; every field but Fence and Logger is
// required.
type PeerMarksConfig struct {
	// Block is this vendor's region's IDs (segment.RegionBlock; zero:
	// every one): the vendors of other regions, which answer across a
	// supercluster's gateways, hand out IDs of their own blocks, and their
	// marks are none of this region's.
	Block segment.Block
	Conn  *nats.Conn // the service's connection
	// Notify, when set, sends the notes of IDs given back (Lower), which
	// happens after Conn is drained at a stop; Conn when nil.
	Notify  *nats.Conn
	JS      kv.JS
	Prefix  string
	Self    string
	Replies *vending.Replies
	// Fence moves whenever the store may have changed under this vendor:
	// the reconnects of Conn to a single server.
	Fence func() uint64
	// TrustAfter is how long a vendor holding a worker ID may not answer
	// before the marks go on without it: twice the lease TTL.
	TrustAfter time.Duration
	// Clock is what that patience is measured on (snowflake.SystemClock).
	Clock  snowflake.Clock
	Logger *slog.Logger
}

// markAnswer is a vendor's answer: its mark of the tag asked.
type markAnswer struct {
	Instance string `json:"instance"`
	Mark     int64  `json:"mark"`
	// In answers to a survey: whether the vendor is sure of the store,
	// and the holders of worker IDs that stopped answering it.
	Sure   bool     `json:"sure,omitempty"`
	Silent []string `json:"silent,omitempty"`
}

var _ segment.Marks = (*PeerMarks)(nil)

// OpenPeerMarks starts answering the other vendors' questions.
func OpenPeerMarks(c PeerMarksConfig) (*PeerMarks, error) {
	if c.Fence == nil {
		c.Fence = func() uint64 { return 0 }
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Clock == nil {
		c.Clock = snowflake.SystemClock{}
	}
	m := &PeerMarks{cfg: c, replies: c.Replies, own: map[string]int64{},
		fenced: c.Fence(), unsureSince: c.Clock.Now(), warned: map[string]bool{},
		pending: map[string][]int64{}, settled: make(chan struct{}), silent: map[string]bool{}}
	if c.Notify == nil {
		c.Notify = c.Conn
		m.cfg.Notify = c.Conn
	}
	m.asker = scatter.NewAsker(scatter.AskerConfig{Conn: c.Conn, Subject: MarksSubject(c.Prefix), What: "questions for the other vendors' segment marks",
		Lost: "after a start or a reconnect it allocates without their marks once twice the lease TTL has passed: a restored store repeats the IDs they handed out", Logger: c.Logger})
	sub, err := c.Conn.Subscribe(MarksSubject(c.Prefix), m.answer)
	if err != nil {
		return nil, fmt.Errorf("cluster: answer on %s: %w", MarksSubject(c.Prefix), err)
	}
	returned, err := c.Conn.Subscribe(ReturnedSubject(c.Prefix), m.noteReturned)
	if err == nil {
		err = c.Conn.Flush()
	}
	if err != nil {
		sub.Unsubscribe()
		return nil, fmt.Errorf("cluster: listen on %s: %w", ReturnedSubject(c.Prefix), err)
	}
	m.sub, m.returned = sub, returned
	m.inFlight.Go(m.survey)
	return m, nil
}

// Close stops answering and waits for an answer being sent.
func (m *PeerMarks) Close(context.Context) error {
	m.inFlight.Stop()
	err := errors.Join(m.sub.Unsubscribe(), m.returned.Unsubscribe())
	m.inFlight.Wait()
	if errors.Is(err, nats.ErrConnectionClosed) {
		return nil
	}
	return err
}

// answer tells another vendor this one's mark of the tag in the body.
func (m *PeerMarks) answer(msg *nats.Msg) {
	if !m.inFlight.Enter() {
		return
	}
	defer m.inFlight.Exit()
	if why := m.replies.Why(msg.Reply); why != "" {
		m.replies.Drop(m.cfg.Logger, msg.Subject, msg.Reply, why)
		return
	}
	tag := string(msg.Data) // "": a survey (PeerMarks.survey), answered 0
	if tag != "" && segment.ValidateTag(tag) != nil {
		return
	}
	a := markAnswer{Instance: m.cfg.Self, Mark: m.settledMark(tag)}
	if tag == "" {
		m.mu.Lock()
		a.Sure = m.sure && m.fenced == m.cfg.Fence()
		if a.Sure {
			a.Silent = slices.Sorted(maps.Keys(m.silent))
		}
		m.mu.Unlock()
	}
	data, _ := json.Marshal(a)
	msg.Respond(data)
}

// settleWait bounds how long an answer waits for this vendor's allocations
// of the tag to settle: each is one store call, and the asker waits
// peerWait for the answer.
const settleWait = peerWait / 2

// sureGrace is peerGrace once sure of the store.
const sureGrace = 2 * time.Millisecond

// settledMark is this vendor's mark of tag once its allocations of it in
// flight settled; one not settled within settleWait counts as committed,
// which at worst skips its IDs.
func (m *PeerMarks) settledMark(tag string) int64 {
	timer := time.NewTimer(settleWait)
	defer timer.Stop()
	m.mu.Lock()
	defer m.mu.Unlock()
	for len(m.pending[tag]) > 0 {
		ch := m.settled
		m.mu.Unlock()
		waited := false
		select {
		case <-ch:
		case <-timer.C:
			waited = true
		}
		m.mu.Lock()
		if waited {
			break
		}
	}
	mark := m.own[tag]
	for _, end := range m.pending[tag] {
		mark = max(mark, end)
	}
	return mark
}

var _ segment.Lowerer = (*PeerMarks)(nil)

// Lower lowers this vendor's mark of tag from from to to, if it is from,
// and tells the other vendors (segment.Lowerer).
func (m *PeerMarks) Lower(ctx context.Context, tag string, from, to int64) (bool, error) {
	m.mu.Lock()
	ok := m.own[tag] == from && to >= 0 && to < from
	if ok {
		m.own[tag] = to
	}
	m.mu.Unlock()
	if !ok {
		return false, nil
	}
	data, _ := json.Marshal(returnedNote{Instance: m.cfg.Self, Tag: tag, From: from, To: to})
	if err := m.cfg.Notify.Publish(ReturnedSubject(m.cfg.Prefix), data); err != nil {
		// Not told: a vendor that knows from as the mark reads the
		// store as gone back at its next allocation, and skips the IDs.
		m.cfg.Logger.Warn("cannot tell the other vendors of IDs given back", "tag", tag, "err", err)
		return true, nil
	}
	fctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return true, m.cfg.Notify.FlushWithContext(fctx)
}

// noteReturned lowers this vendor's mark of a tag another vendor gave IDs
// of back, when this one knows that vendor's mark as the tag's.
func (m *PeerMarks) noteReturned(msg *nats.Msg) {
	if !m.inFlight.Enter() {
		return
	}
	defer m.inFlight.Exit()
	var n returnedNote
	if len(msg.Data) > maxPeerBytes || json.Unmarshal(msg.Data, &n) != nil || n.Instance == m.cfg.Self ||
		segment.ValidateTag(n.Tag) != nil || n.To < 0 || n.To >= n.From {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.own[n.Tag] == n.From {
		m.own[n.Tag] = n.To
	}
}

// Record notes this vendor's allocation of tag up to end, about to commit:
// answers wait until it is settled.
func (m *PeerMarks) Record(_ context.Context, tag string, end int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.pending[tag] = append(m.pending[tag], end)
	return nil
}

// Settle ends the allocation of tag up to end that Record noted: its end
// is this vendor's mark if it committed.
func (m *PeerMarks) Settle(tag string, end int64, committed bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.pending[tag]
	if i := slices.Index(p, end); i >= 0 {
		p = slices.Delete(p, i, i+1)
	}
	if len(p) == 0 {
		delete(m.pending, tag)
	} else {
		m.pending[tag] = p
	}
	if committed {
		m.own[tag] = max(m.own[tag], end)
	}
	close(m.settled)
	m.settled = make(chan struct{})
}

// Mark returns the highest of this vendor's mark of tag and the other
// vendors', whom it asks at every allocation: a store rewritten live (nats
// kv put) gives no sign on the connection. Until every vendor holding a
// worker ID has answered once since this vendor started or reconnected (it
// cannot be sure the store is as they left it), one that does not answer
// is waited for, up to TrustAfter. Once sure, one that stops answering (a
// vendor killed holds its worker ID until its lease expires) is allocated
// without, above the last mark it answered, and not waited for again until
// it answers.
func (m *PeerMarks) Mark(ctx context.Context, tag string) (int64, error) {
	for try := 1; ; try++ {
		m.mu.Lock()
		m.refence()
		fenced, sure := m.fenced, m.sure
		patience := m.cfg.TrustAfter - m.cfg.Clock.Now().Sub(m.unsureSince)
		silent := maps.Clone(m.silent)
		m.mu.Unlock()
		theirs, silent, err := m.ask(ctx, tag, sure, patience, silent)
		if err != nil {
			return 0, err
		}
		m.mu.Lock()
		if m.refence(); m.fenced != fenced {
			// Reconnected while asking: the holders it expected were
			// read from a store that may have gone back since. Ask again,
			// unsure.
			m.mu.Unlock()
			if try < 3 {
				continue
			}
			return 0, fmt.Errorf("%w: tag %q: NATS reconnected while this vendor asked the others for their marks; retry", segment.ErrUnavailable, tag)
		}
		if len(silent) == 0 {
			m.sure = true
		}
		m.silent = silent
		// What the others handed out is known here now: it is answered to
		// the vendors that ask next, and floors this vendor's allocations.
		m.own[tag] = max(theirs, m.own[tag])
		mark := m.own[tag]
		m.mu.Unlock()
		return mark, nil
	}
}

// refence makes this vendor unsure of the store again once the fence
// moved (a reconnect). m.mu is held.
func (m *PeerMarks) refence() {
	if f := m.cfg.Fence(); f != m.fenced {
		m.fenced, m.unsureSince, m.sure, m.holderList = f, m.cfg.Clock.Now(), false, nil
	}
}

// surveyEvery is how often a vendor asks every vendor whether it is
// there.
const surveyEvery = time.Second

// survey asks every vendor, with no tag, every surveyEvery. A vendor not
// sure of the store becomes sure once every holder of a worker ID answered
// since the fence, so that a vendor that takes a strict tag's lead from one
// killed with -9 does not wait for the dead one's answer (it holds its
// worker ID until its lease expires); or once every holder that did not
// answer has stopped answering every vendor that is sure, so that a vendor
// started after another was killed need not wait either. A sure vendor's
// surveys keep which holders stopped answering. A store that went back
// before this vendor started is raised above what the live vendors
// answer; what only a dead one knew is gone with it, however long one
// waits.
func (m *PeerMarks) survey() {
	stop := m.inFlight.Stopping()
	tick := time.NewTicker(surveyEvery)
	defer tick.Stop()
	for {
		m.mu.Lock()
		m.refence()
		fenced := m.fenced
		m.mu.Unlock()
		if unanswered, excused, err := m.surveyOnce(); err == nil {
			m.mu.Lock()
			if m.fenced == fenced {
				m.sure = m.sure || all(unanswered, excused)
				if m.sure {
					m.silent = unanswered
				}
			}
			m.mu.Unlock()
		}
		select {
		case <-stop:
			return
		case <-tick.C:
		}
	}
}

// all reports whether every key of unanswered is in excused.
func all(unanswered, excused map[string]bool) bool {
	for h := range unanswered {
		if !excused[h] {
			return false
		}
	}
	return true
}

// surveyOnce asks every vendor whether it is there, and returns the holders
// of worker IDs that did not answer, and those that every vendor sure of
// the store (one at least) says stopped answering. It takes at most
// 2*peerWait, which bounds how long Close waits for it.
func (m *PeerMarks) surveyOnce() (unanswered, excused map[string]bool, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*peerWait)
	defer cancel()
	holders, err := m.holders(ctx)
	if err != nil {
		return nil, nil, err
	}
	unanswered = map[string]bool{}
	for _, h := range holders {
		if h != "" && h != m.cfg.Self {
			unanswered[h] = true
		}
	}
	var silent []map[string]bool // per sure vendor
	q := scatter.Question{Wait: peerWait, Grace: peerGrace, Enough: func() bool { return len(unanswered) == 0 }, Clock: m.cfg.Clock}
	err = m.asker.Ask(ctx, q, func(ans scatter.Answer) {
		var a markAnswer
		if len(ans.Data) > maxPeerBytes || json.Unmarshal(ans.Data, &a) != nil || a.Instance == "" {
			return
		}
		delete(unanswered, a.Instance)
		if a.Sure {
			s := map[string]bool{}
			for _, h := range a.Silent {
				s[h] = true
			}
			silent = append(silent, s)
		}
	})
	if err != nil {
		return nil, nil, err
	}
	excused = map[string]bool{}
	for h := range unanswered {
		excused[h] = len(silent) > 0
		for _, s := range silent {
			excused[h] = excused[h] && s[h]
		}
	}
	return unanswered, excused, nil
}

// ask asks every vendor for its mark of tag and returns the highest, and
// the holders of worker IDs that did not answer. Unless sure, it fails
// while one has not answered and patience is not up; once sure, it does
// not wait for those silent at the last question.
func (m *PeerMarks) ask(ctx context.Context, tag string, sure bool, patience time.Duration, silent map[string]bool) (int64, map[string]bool, error) {
	holders, err := m.holders(ctx)
	if err != nil {
		return 0, nil, err
	}
	unanswered, expect := map[string]bool{}, map[string]bool{}
	for _, h := range holders {
		if h != "" && h != m.cfg.Self {
			unanswered[h] = true
			expect[h] = !sure || !silent[h]
		}
	}
	waiting := len(expect)
	for _, e := range expect {
		if !e {
			waiting--
		}
	}
	// Once sure, the vendors not holding a worker ID (static ones) are
	// heard for sureGrace only: every allocation waits that long.
	var highest int64
	grace := peerGrace
	if sure {
		grace = sureGrace
	}
	q := scatter.Question{Body: []byte(tag), Wait: peerWait, Grace: grace, Enough: func() bool { return waiting == 0 }, Clock: m.cfg.Clock}
	err = m.asker.Ask(ctx, q, func(ans scatter.Answer) {
		var a markAnswer
		if len(ans.Data) > maxPeerBytes || json.Unmarshal(ans.Data, &a) != nil || a.Instance == "" || a.Mark < 0 || !m.ours(a.Mark) {
			return
		}
		if unanswered[a.Instance] {
			delete(unanswered, a.Instance)
			if expect[a.Instance] {
				waiting--
			}
		}
		highest = max(highest, a.Mark)
	})
	refused := errors.Is(err, scatter.ErrRefused) // the Asker says so: as if no one answered
	if err != nil && !refused {
		return 0, nil, err
	}
	missing := slices.Sorted(maps.Keys(unanswered))
	switch {
	case len(missing) == 0:
	case sure:
		m.quietOnce(missing)
	case patience > 0 && refused:
		return 0, nil, fmt.Errorf("%w: tag %q: this vendor cannot be sure the store is as it left it (it started, or reconnected) "+
			"and cannot ask %s, which hold worker IDs, for their marks (for at most %v more): %w",
			segment.ErrUnavailable, tag, strings.Join(missing, ", "), patience.Round(time.Second), err)
	case patience > 0:
		return 0, nil, fmt.Errorf("%w: tag %q: this vendor cannot be sure the store is as it left it (it started, or reconnected) "+
			"and waits for the marks of %s, which hold worker IDs (for at most %v more)",
			segment.ErrUnavailable, tag, strings.Join(missing, ", "), patience.Round(time.Second))
	default:
		m.warnOnce(missing)
	}
	return highest, unanswered, nil
}

// holdersFor is how long the list of worker-ID holders is kept: it changes
// when a vendor starts or stops, and a vendor that started meanwhile is
// still heard (within peerGrace), only not waited for.
const holdersFor = time.Second

// holders returns the holders of worker IDs, read again once holdersFor
// passed: every allocation asks the vendors, and listing the bucket costs
// more than the question.
func (m *PeerMarks) holders(ctx context.Context) (map[int]string, error) {
	m.mu.Lock()
	h, at := m.holderList, m.holdersAt
	m.mu.Unlock()
	now := m.cfg.Clock.Now()
	if h != nil && now.Sub(at) >= 0 && now.Sub(at) < holdersFor {
		return h, nil
	}
	h, err := kv.Holders(ctx, m.cfg.JS)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	m.holderList, m.holdersAt = h, now
	m.mu.Unlock()
	return h, nil
}

// quietOnce logs, once per holder, holders that stopped answering.
func (m *PeerMarks) quietOnce(missing []string) {
	if fresh := m.fresh(missing); len(fresh) > 0 {
		m.cfg.Logger.Info("vendors that hold worker IDs stopped answering for their segment marks (stopped, killed or cut off): allocating above the last marks they answered",
			"vendors", strings.Join(fresh, ", "))
	}
}

// fresh returns the holders of missing not logged yet, and notes them.
func (m *PeerMarks) fresh(missing []string) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var fresh []string
	for _, h := range missing {
		if !m.warned[h] {
			m.warned[h] = true
			fresh = append(fresh, h)
		}
	}
	return fresh
}

// ours reports whether a mark (a max_id: an end) can be this region's.
func (m *PeerMarks) ours(mark int64) bool {
	b := m.cfg.Block
	return b == (segment.Block{}) || mark == 0 || mark >= b.First && mark <= b.End
}

func (m *PeerMarks) warnOnce(missing []string) {
	if fresh := m.fresh(missing); len(fresh) > 0 {
		m.cfg.Logger.Warn("vendors that hold worker IDs never answered for their segment marks: allocating without them "+
			"(if the NATS store was restored, the IDs only they handed out may repeat); upgrade them, or grant them publish on "+MarksSubject(m.cfg.Prefix),
			"vendors", strings.Join(fresh, ", "))
	}
}
