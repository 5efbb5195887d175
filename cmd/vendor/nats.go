package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leaf-nats/leaf/admin"
	"github.com/leaf-nats/leaf/cluster"
	"github.com/leaf-nats/leaf/internal/backoff"
	"github.com/leaf-nats/leaf/internal/natsperm"
	"github.com/leaf-nats/leaf/internal/natsserver"
	"github.com/leaf-nats/leaf/kv"
	"github.com/leaf-nats/leaf/segment"
	"github.com/leaf-nats/leaf/snowflake"
	"github.com/leaf-nats/leaf/status"
	"github.com/leaf-nats/leaf/strict"
	"github.com/leaf-nats/leaf/workerid"
)

// startupBudget is how long a start-up step is retried for an error that
// is neither permanent nor transient (one this vendor does not know).
// Transient errors are retried for as long as they last.
const startupBudget = 30 * time.Second

// transient reports whether a start-up error is NATS or JetStream not
// answering in time: a fresh or busy cluster whose replicated buckets have
// no leader yet, a server restarting. Waiting fixes it, so the step is
// retried without end, and /readyz says why meanwhile.
func transient(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse)
}

// permanent reports whether a start-up error is one that waiting cannot fix.
func permanent(err error) bool {
	var mismatch *cluster.MismatchError
	return errors.As(err, &mismatch) || errors.Is(err, workerid.ErrClockBehind) ||
		errors.Is(err, kv.ErrReplicas) || errors.Is(err, segment.ErrRefused) ||
		errors.Is(err, snowflake.ErrSettings) || errors.Is(err, jetstream.ErrJetStreamNotEnabled) ||
		errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) || errors.Is(err, errDenied)
}

// retry runs f until it succeeds, fails for good, or startupBudget
// passes, and tells the HTTP server meanwhile, for /readyz, what the start
// is doing and why it retries.
func (v *vendor) retry(ctx context.Context, what string, f func() error) error {
	starting := func(string, error) {}
	if v.http != nil {
		starting = v.http.Starting
	}
	return retrying(ctx, v.log, starting, what, startupBudget, func() error {
		if v.dataConn == nil {
			return f()
		}
		since := natsperm.Now(v.dataConn)
		err := f()
		if r, ok := since.Refused(); err != nil && ok && jetStreamDenied(r) {
			return fmt.Errorf("%w: %v, so this vendor cannot %s (%v): grant its NATS user what docs/nats-accounts.conf grants leaf-vendor",
				errDenied, r.Err, what, err)
		}
		return err
	})
}

// errDenied is a start-up step that NATS permissions refuse: waiting
// cannot fix it.
var errDenied = errors.New("NATS refuses this vendor's user")

// jetStreamDenied reports whether r refuses a JetStream or KV subject
// (what JetStream and its buckets need).
func jetStreamDenied(r natsperm.Refusal) bool {
	return strings.HasPrefix(r.Subject, "$JS.") || strings.HasPrefix(r.Subject, "$KV.")
}

// reportedElsewhere reports whether err is NATS refusing a publish that the
// vendor's part that made it says itself, once and with what to grant: the
// askers of the other vendors and of the servers' settings, and the strict
// tags' probe. The connection's error handler leaves those to it.
func reportedElsewhere(err error, prefix string) bool {
	r, ok := natsperm.Parse(err)
	if !ok || r.Op != natsperm.Publish {
		return false
	}
	switch r.Subject {
	case status.StatsSubject, cluster.PeersSubject(prefix), cluster.MarksSubject(prefix), natsserver.VarzSubject:
		return true
	}
	return strings.HasSuffix(r.Subject, "."+strict.HandoffProbe)
}

func retrying(ctx context.Context, log *slog.Logger, starting func(string, error), what string, budget time.Duration, f func() error) error {
	deadline := time.Now().Add(budget)
	b := backoff.Backoff{Min: 100 * time.Millisecond, Max: 2 * time.Second}
	for {
		starting(what, nil)
		err := f()
		wait := b.Next()
		switch {
		case err == nil:
			return nil
		case permanent(err), ctx.Err() != nil, !transient(err) && time.Now().Add(wait).After(deadline):
			return err
		}
		starting(what, err)
		log.Warn("start-up step failed; retrying", "step", what, "err", err, "retry_in", wait)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// connect dials NATS with the configured authentication. It fails at once
// (no retry loop) when the first connection is refused, so a wrong password
// ends the process with the server's reason instead of hanging.
func connect(natsURL string, cfg Config, name string, log *slog.Logger) (*nats.Conn, <-chan struct{}, error) {
	opts, err := cfg.natsOptions()
	if err != nil {
		return nil, nil, err
	}
	closed := make(chan struct{})
	opts = append(opts,
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(time.Second),
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
			if err != nil {
				log.Warn("NATS disconnected; reconnecting", "conn", name, "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info("NATS reconnected", "conn", name, "url", redact(nc.ConnectedUrl()))
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			if reportedElsewhere(err, cfg.SubjectPrefix) {
				return
			}
			subj := ""
			if sub != nil {
				subj = sub.Subject
			}
			log.Error("NATS error", "conn", name, "subject", subj, "err", err)
		}),
		nats.ClosedHandler(func(*nats.Conn) { close(closed) }),
	)
	nc, err := nats.Connect(natsURL, opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("connect to NATS at %s: %w%s", redact(natsURL), err, connectHint(err))
	}
	return nc, closed, nil
}

// connectHint says what to check after a failed first connection.
func connectHint(err error) string {
	var (
		certErr    *tls.CertificateVerificationError
		unknownCA  x509.UnknownAuthorityError
		hostErr    x509.HostnameError
		invalidErr x509.CertificateInvalidError
		alertErr   tls.AlertError
		recordErr  tls.RecordHeaderError
	)
	switch {
	case errors.Is(err, nats.ErrAuthorization), errors.Is(err, nats.ErrAuthExpired),
		errors.Is(err, nats.ErrAuthRevoked), errors.Is(err, nats.ErrAccountAuthExpired):
		return " (the server refused the credentials: check the URL's user:password, LEAF_NATS_CREDS, LEAF_NATS_NKEY, LEAF_NATS_USER/PASSWORD or LEAF_NATS_TOKEN)"
	case errors.As(err, &certErr), errors.As(err, &unknownCA), errors.As(err, &hostErr),
		errors.As(err, &invalidErr), errors.As(err, &alertErr), errors.As(err, &recordErr),
		errors.Is(err, nats.ErrSecureConnRequired), errors.Is(err, nats.ErrSecureConnWanted):
		return " (TLS failed: check that LEAF_NATS_TLS_CA trusts the server's certificate and that LEAF_NATS_TLS_CERT/KEY hold a client certificate the server trusts)"
	case errors.Is(err, nats.ErrNoServers):
		return " (is a NATS server running there? leave LEAF_NATS_URL empty for an embedded one)"
	}
	return ""
}

// redact hides passwords in NATS URLs for logs.
func redact(s string) string { return admin.Redact(s) }

// checkSync warns when a NATS server syncs JetStream lazily: a power cut
// takes its store back to before writes it acknowledged (worker-ID leases,
// segment rows, marks). Only a user of the system account sees the servers'
// settings; others are told once what to check, but for a vendor on another
// vendor's embedded server, whose settings are known.
func (v *vendor) checkSync() {
	if v.dataConn.ConnectedServerName() == natsserver.EmbeddedName {
		return // another vendor's embedded server, which syncs every write
	}
	syncs, err := natsserver.Syncs(v.dataConn, 500*time.Millisecond)
	if err != nil {
		v.log.Info("cannot see whether the NATS servers sync JetStream writes before acknowledging them (their settings are visible to the system account only): run them with sync_interval: always, or a power cut can take the store back to before acknowledged writes (docs/operations.md)", "err", err)
		return
	}
	for _, s := range syncs {
		if s.JetStream && !s.Always {
			v.log.Warn("NATS server "+s.Server+" syncs JetStream to disk every "+s.Interval.String()+", not before acknowledging a write: a power cut takes its store back by up to that long, and what vendors cannot tell from elsewhere is repeated. Set sync_interval: always in its jetstream block (docs/operations.md)",
				"server", s.Server, "sync_interval", s.Interval)
		}
	}
}
