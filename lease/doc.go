// Package lease holds a fenced lease: the one state machine that worker
// IDs (workerid.Keeper) and strict tags' leads (strict.Leaders) both run,
// and the driver that runs it.
//
// # The machine
//
// A Machine is stepped the way etcd's raft is: an Event says what
// happened and when (the time is in the event; the machine reads no
// clock), and Step returns a Ready that says what to do: an Action (claim,
// renew, release: at most one at a time, whose outcome is the next
// event), open the serving window until a deadline or shut it, log, and
// when to be woken next. It does no I/O and starts no goroutine, so tests
// step it through every case and simulations run it in simulated time.
//
//	state      event                   next state: what the Ready asks
//	Idle       tick, the retry due     Claiming: claim
//	Claiming   claimed                 Starting: renew
//	           claim failed            Idle: claim again after a backoff
//	                                   (Stopped without Reclaim, or on a
//	                                   permanent error before any hold)
//	Starting   renewed                 Held: open the window
//	           failed, lost            Releasing: release (then Idle with a
//	                                   backoff, or Stopped)
//	Held       tick, renewal due or    Renewing: renew
//	           fence moved
//	           stop                    Releasing: shut, release, then Stopped
//	Renewing   renewed                 Held: extend the window
//	           failed                  Held: retry in a quarter of the
//	                                   interval (without Reclaim and past
//	                                   the deadline: shut, release, Stopped)
//	           lost                    shut; Claiming with Reclaim, else
//	                                   Stopped
//	Releasing  released                Idle (after a failed start, with
//	                                   Reclaim) or Stopped
//
// A hold serves only within its Window: from the claim's NotBefore until
// the last renewal's deadline, while the fence reads what it read before
// that renewal. The deadline is measured from before the renewal was sent,
// less a margin, so it passes before the store can expire the key and let
// anyone else claim it: two holders never serve at once. A renewal is due
// every third of the hold; a failed one is retried every quarter of that,
// so two may fail and the third still lands before the deadline. The
// fence is the reconnect count of the connection requests arrive on: a
// reconnect may reach a server that lost every lease, so a moved fence
// shuts the window (Window.Check) until a renewal made on the new server
// opens it again.
//
// A loss (ErrLost: the key expired, was deleted, is another claim's, or
// the store went back) shuts the window at once. What follows is
// configuration (Config.Reclaim), not a second machine: a worker ID is
// claimed again, at once after a loss and after a backoff after a failed
// claim; a strict lead stops (the next request for the tag may take the
// lead again), as it does when its renewals fail past its deadline, where
// it gives the key up so that another vendor need not wait for it to
// expire. A Stop shuts the window and releases the hold; one that comes
// while an action is out takes effect with its outcome. A clock stepped
// back moves what is due back with it (a renewal is put off by at most an
// interval, not by the step); deadlines stay where their clock put them.
//
// # The driver
//
// A Driver is the loop around one machine: it waits on its Clock's alarm
// until the machine's wake-up (or until rung: the fence moved, a renewal
// is overdue), steps the machine, and does what it asks through a Lessee,
// the holder's side: Claim, Renew and Release are the I/O (kv.Lease for a
// worker ID, kv.Lead for a strict tag), Serve and Shut open and close
// what the holder serves (a snowflake generator's window; a strict tag's
// buffer and subscription). The clock is injected: in production real
// timers on the snowflake clock (Timers), in the lease simulation
// (cluster) alarms that go off as simulated time passes, so the
// simulation runs this loop and not a model of it.
package lease
