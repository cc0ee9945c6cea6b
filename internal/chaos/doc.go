// Package chaos is fleet's fault suite. It has no API: its test, TestChaos
// (chaos_test.go), starts batch worker processes, sweeper processes and a
// reserver process (Reserve with short ctxs, so that many end while the
// script is in flight) — the test binary itself, re-executed in a role —
// submits tasks, and injects faults while they run: SIGKILL, SIGSTOP/SIGCONT
// and SIGTERM of worker and sweeper processes, redis-server restarts (SIGKILL and SIGTERM, with
// appendonly yes and appendfsync always), and connection cuts, blackholes
// and replies held back through a TCP proxy in front of each process. Every
// process writes what it did (handler starts and ends, acks) to an
// append-only evidence file that outlives it and any Redis restart; the
// test counts from that evidence what was submitted, acked, lost and acked
// twice, the handler runs of one task that overlapped, and the runs begun
// after their lease deadline, and fails unless lost, acked twice,
// overlapping and late runs are all zero.
//
// Beside the plain tasks, the submitter submits flows of fan-out 10 /
// fan-in 1 (a root, ten tasks after it, a join after the ten, over three
// queues: flows_test.go), and every process records the releases its
// Observer sees (R lines). From that evidence and what Redis holds after
// the drain, the suite fails unless no flow task began before each task it
// waits for ended well, none was released twice, no flow whose submit was
// confirmed is stranded (each is done with its twelve tasks succeeded),
// and no key of a flow is left but the end and flow records with their
// retention (docs/FLOWS.md).
//
// TestLinearizable (linearize_test.go) checks fleet against models it did
// not write, with porcupine (github.com/anishathalye/porcupine): three
// clients (each a writing Fleet and a Fleet that reads through its cache,
// all behind proxies) under cuts, blackholes, held replies and
// redis-server SIGKILL/SIGTERM restarts, and a client process (KV, Counter,
// Lock) SIGKILLed and SIGSTOPped. Fresh KV reads with Set and Delete
// must be linearizable (a register per key), and so must Counter's Incr
// and Get; cached reads must be no staler than Options.CacheTTL; Lock
// grants must carry growing fences and never overlap, Semaphore holds
// never pass the limit, and a Limiter never lets more than Burst +
// w*Rate/Per tokens through in any window w. It runs for -lin.time (8 s in CI).
//
// TestFlowControlFaults (flowcontrol_test.go) puts the flow controls of
// issue #34 under faults: 10,000 tasks (-fc.tasks; 3,000 with -short) and
// debounced tasks (SubmitOptions.Debounce: 20 keys, bursts of 10) go
// through chunk workers (NewChunkWorker) in three processes that are
// SIGKILLed and started again, and on the single node redis-server is
// SIGKILLed and restarted and connections are cut. It fails unless lost,
// acked twice, overlapping runs, and debounced runs without their last
// acknowledged payload are all zero. TestFlowControlDebounceRestart
// SIGKILLs redis-server inside a debounce window that three Fleets'
// submits made: the task still runs once, with the last acknowledged
// payload.
//
// Durable waits (signals_test.go): a fifth of the tasks wait, after their
// step, for a signal (fleet.WaitSignal), and some sleep first
// (fleet.Sleep), parked meanwhile (W lines; a wait's value is a G line).
// The parent sends each waiting task its signal through the submitter's
// proxy (one send in four with a ctx of a few ms, which may end while the
// script is in flight), sending again until a reply says it applied (nil,
// ErrSignalSent, or, after an unknown outcome, that the task ended), and
// samples Redis every 100 ms for a task parked in :scheduled while it
// holds a lease in :processing. The suite fails unless signals lost
// (confirmed sent, taken by no wait), waits that returned another value,
// sends refused, waits timed out, overlapping runs of a task that parked
// or took its signal (resumed twice at once), and parked tasks holding a
// lease are all zero. And some tasks start two children on another queue
// (fleet.StartChild; every worker process runs it too) and wait for them
// (fleet.AwaitChildren), parked: the suite fails unless children lost,
// parents whose runs started other children, waits with wrong results,
// and parents stranded (their children ended, they did not) are all zero
// (children_test.go).
//
// The single node is a redis-server of the suite's own (it restarts it),
// with a proxy in front of every process. On the cluster no proxy can sit
// in front (the cluster redirects clients past it) and the servers are
// shared, so only the process faults run there: workers killed, stopped
// and stopped gracefully, sweepers killed and stopped.
//
// The default size (300 tasks per target, 3 s per fault phase) runs in CI,
// under -race, in a minute or two; -short makes it smaller. A big run:
//
//	go test ./internal/chaos -run TestChaos -count=1 -timeout 2h -v \
//	    -chaos.tasks=50000 -chaos.phase=30s -chaos.workers=4 -chaos.slots=8 -chaos.long=0.05
//
// and the flows at their big size (12 per target in CI, 6 with -short):
//
//	go test ./internal/chaos -run TestChaos -count=1 -timeout 2h -v \
//	    -chaos.flows=1000 -chaos.tasks=3000 -chaos.phase=8s
//
// -chaos.seed draws the same faults and tasks again (the seed is logged;
// the timing still varies), -chaos.phases picks phases, -chaos.targets
// picks single and/or cluster, -chaos.dir keeps the evidence (faults.log,
// submitted.log, ev/*.log, the children's stderr in log/, report.json).
// See the flags in chaos_test.go.
package chaos
