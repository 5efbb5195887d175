// Package e2e holds whole-process tests of leaf-nats: real vendor binaries
// (built once per test run by TestMain with go build -tags e2e ./cmd/vendor,
// which adds the clock hooks below and nothing else), run as
// subprocesses against nats-servers embedded in the test process (one node,
// or a three-node JetStream cluster) and, for segments, real Postgres from
// internal/pgtest. Every scenario tries hard to make the service hand out an
// ID twice, collects every ID it is given and counts the duplicates, which
// must be zero:
//
//   - TestKillNineUnderLoad: three vendors in one queue group, one killed
//     with SIGKILL and restarted every few seconds, snowflake and segment
//     load at once (at least 1,000,000 IDs of each).
//   - TestClusterLeaderLoss: a three-node JetStream cluster, KV buckets with
//     three replicas; the leader of the lease bucket's stream is shut down
//     under load.
//   - TestLeaseExpiryAndReuse: a vendor frozen with SIGSTOP past its lease
//     TTL loses its worker ID to another vendor (also one whose clock is 5s
//     behind) and must not vend with it after SIGCONT.
//   - TestPostgresOutage: Postgres stopped for 30s under segment load:
//     buffers, then 503s (never a hang), then recovery.
//   - TestClockStepBack, TestClockBehindAtCrash, TestRestartWithFutureTimestamp:
//     clock faults through LEAF_TEST_CLOCK_OFFSET(_FILE), which only the e2e
//     build of the vendor reads (cmd/vendor/clock_e2e.go).
//   - TestWorkerIDExhaustion, TestConcurrentFirstStarts: 128 concurrent
//     claims and one more for a range of 128 worker IDs, then one with all
//     1,024 held; 20 vendors starting at once.
//   - TestLeafHTTPFlood, TestLeafSnowflakeSideBySide: Leaf's HTTP API
//     (LEAF_HTTP_LEAF_API) flooded by 256 clients while NATS requests must
//     all be served; simulated Leaf snowflake servers (worker IDs 0-3)
//     vending beside vendors with LEAF_WORKER_ID_RANGE=16-1023.
//   - TestHostileLoad*: issue 27's attacks under the shipped
//     configuration (hostile_load_test.go): a billion IDs at once and loads
//     beyond LEAF_SEGMENT_RATE_LIMIT, made-up tags against 20,000 (KV, with
//     the NATS server's CPU and memory; Postgres, with its reads), replies
//     aimed at another application's inboxes, big js53 batches beside
//     single IDs, and all at once (TestHostileLoadSoak).
//   - TestHostileRequests: malformed counts, tags and subjects against
//     running vendors, with no crash and no store write. The codec and tag
//     parser are also fuzzed (FuzzParseCount, FuzzDecodeText in vending,
//     FuzzValidateTag in segment).
//   - TestLoadgenOrder: the loadgen binary with -check-order against two
//     vendors finds order violations on a normal tag (step 10) and none on
//     a strict tag; -check-history of each run's history counts the same.
//
// Each scenario prints one summary line (IDs collected, duplicates, errors
// by code, elapsed) with t.Logf and on standard output; go test shows them
// with -v, and LEAF_E2E_SUMMARY=<file> appends them to a file.
//
// The scenarios that mostly wait (for lease TTLs, restarts, partitions)
// and check no latency, CPU or memory figure call t.Parallel: go test runs
// them after the others, three at a time (or GOMAXPROCS, when more; a
// -parallel flag overrides it: TestMain sets this package's default), each
// on servers of its own. Those that measure, flood the
// machine or change what the whole process shares (its open-files limit)
// run alone. A server a test restarts on the same port takes it from
// natstest.FreePort, below the ephemeral range, where the port-0 listeners
// of the tests beside it never land. A test that sets the environment
// (t.Setenv) cannot run in parallel: what every test needs is set once, in
// runTests.
//
// Run the suite with scripts/test.sh ./test/e2e/..., which provides
// Postgres. With CI=true, tests that cannot get Postgres fail instead of
// skipping. The defaults fit a two-core CI machine in a few minutes:
//
//	LEAF_E2E_SOAK=1            soak: about ten times the IDs, kills and fault durations
//	LEAF_E2E_VENDOR_RACE=1     build the vendor binary with -race
//	LEAF_E2E_VERBOSE=1         print every vendor's log, not only on failure
//	LEAF_E2E_VENDOR_BIN=path   run another vendor build (an older release: to
//	                           count what it did wrong) instead of building one
//
// A soak run wants a longer go test timeout, e.g.
//
//	LEAF_E2E_SOAK=1 scripts/test.sh -timeout 2h -v ./test/e2e/...
package e2e
