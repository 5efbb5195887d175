package vending

import (
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/leaf-nats/leaf/internal/throttle"
)

// DefaultReplyPrefixes are the reply subjects a vendor answers by default:
// NATS inboxes (nats.go, natscli and nats.js make them under _INBOX.) and
// the reply subjects of service imports from another account (the server
// makes them under _R_.).
var DefaultReplyPrefixes = []string{nats.InboxPrefix, "_R_."}

// A requester chooses its reply subject, and the vendor publishes its answer
// there with its own permissions. Answered blindly, a request whose reply
// subject is a KV key ($KV.leaf_segments.<tag>) or a pending JetStream
// request of the vendor's own would become a write to the vendor's state.
// So a reply goes only to a subject that can be an inbox: one under a reply
// prefix (Config.ReplyPrefixes), never a '$' subject, never one of the
// service's own subjects, never the inboxes the vendor's own JetStream
// requests wait on (Config.OwnInboxes).

// Replies decides which reply subjects are answered: those under a reply
// prefix, but not under one of the vendor's own inboxes. Every subject a
// vendor answers on goes through one (the service, the strict forwarder,
// the vendors' safety exchange).
type Replies struct {
	allow  []string       // reply prefixes
	refuse []string       // prefixes refused although allowed: the vendor's own
	drops  throttle.Lines // a flood of dropped requests must not flood the log
}

// NewReplies answers the reply subjects under prefixes (checked with
// CheckReplyPrefix; none: DefaultReplyPrefixes) but under none of own.
func NewReplies(prefixes, own []string) *Replies {
	if len(prefixes) == 0 {
		prefixes = DefaultReplyPrefixes
	}
	return &Replies{allow: prefixes, refuse: own}
}

// RequestInbox returns the prefix of the inboxes on which nc's requests
// (nc.Request, JetStream API calls) wait for their replies.
func RequestInbox(nc *nats.Conn) string {
	own := nc.NewRespInbox()
	return own[:strings.LastIndexByte(own, '.')+1]
}

// CheckReplyPrefix reports whether p can be a reply prefix: literal subject
// tokens ending with a dot, not a '$' subject and not under the service's
// prefix.
func CheckReplyPrefix(p, prefix string) error {
	switch {
	case p == "" || !strings.HasSuffix(p, "."):
		return fmt.Errorf("reply prefix %q: want subject tokens ending with a dot, such as _INBOX. or _INBOX_orders.", p)
	case strings.HasPrefix(p, "$"):
		return fmt.Errorf("reply prefix %q: '$' subjects belong to the server (JetStream, KV, system): a reply there would write to them", p)
	case strings.HasPrefix(p, prefix+"."):
		return fmt.Errorf("reply prefix %q: subjects under %s. are the service's own", p, prefix)
	case !validSubject(p[:len(p)-1]):
		return fmt.Errorf("reply prefix %q: want literal tokens (no spaces, wildcards or empty tokens)", p)
	}
	return nil
}

// Why a request is dropped: the reason label of the Observer's Dropped.
const (
	DropNoReply   = "no reply subject"
	DropTooLong   = "a reply subject over 512 bytes"
	DropNotInbox  = "a reply subject that is no inbox"
	DropOwnInbox  = "a reply subject among this vendor's own inboxes"
	DropMalformed = "a malformed reply subject"
)

// DropReasons lists every reason a request is dropped for.
var DropReasons = []string{DropNoReply, DropTooLong, DropNotInbox, DropOwnInbox, DropMalformed}

// Why says why reply is not one to answer, "" when it is.
func (g *Replies) Why(reply string) string {
	switch {
	case reply == "":
		return DropNoReply
	case len(reply) > maxReplyLen:
		return DropTooLong
	}
	allowed := false
	for _, p := range g.allow {
		if strings.HasPrefix(reply, p) {
			allowed = true
			break
		}
	}
	if !allowed {
		return DropNotInbox
	}
	for _, p := range g.refuse {
		if strings.HasPrefix(reply, p) {
			return DropOwnInbox
		}
	}
	if !validSubject(reply) {
		return DropMalformed
	}
	return ""
}

// maxReplyLen bounds a reply subject: inboxes are a few dozen bytes.
const maxReplyLen = 512

// validSubject reports whether s is a literal subject: non-empty tokens of
// printable ASCII without wildcards, separated by single dots.
func validSubject(s string) bool {
	if s == "" {
		return false
	}
	prev := byte('.')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '.' && prev == '.':
			return false
		case c <= ' ' || c >= 0x7f || c == '*' || c == '>':
			return false
		}
		prev = c
	}
	return prev != '.'
}

// guard wraps a handler so that it sees only requests whose reply subject
// may be answered; the others are dropped, before any ID is taken.
func (s *Service) guard(mode string, h micro.Handler) micro.Handler {
	return micro.HandlerFunc(func(req micro.Request) {
		if why := s.replies.Why(req.Reply()); why != "" {
			s.drop(mode, req.Subject(), req.Reply(), why)
			return
		}
		h.Handle(req)
	})
}

// drop counts and logs a request that gets no answer.
func (s *Service) drop(mode, subject, reply, why string) {
	s.obs.Dropped(mode, why)
	s.replies.Drop(s.log, subject, reply, why)
}

// Drop logs a request dropped for why, at most once every few seconds with
// a count of those since.
func (g *Replies) Drop(log *slog.Logger, subject, reply, why string) {
	held, ok := g.drops.Allow(time.Now())
	if !ok {
		return
	}
	log.Warn("dropped a request with "+why, "subject", subject, "reply", quote([]byte(reply)), "more_since_last_line", held,
		"hint", "a vendor answers only inboxes ("+strings.Join(g.allow, ", ")+"; LEAF_REPLY_PREFIXES), never '$' subjects or its own; someone may be trying to make it write to its own state")
}
