// Package chaos is fleet's fault suite. It has no API: its test, TestChaos
// (chaos_test.go), starts batch worker processes and sweeper processes (the
// test binary itself, re-executed in a role), submits tasks, and injects
// faults while they run: SIGKILL, SIGSTOP/SIGCONT and SIGTERM of worker and
// sweeper processes, redis-server restarts (SIGKILL and SIGTERM, with
// appendonly yes and appendfsync always), and connection cuts, blackholes
// and replies held back through a TCP proxy in front of each process. Every
// process writes what it did (handler starts and ends, acks) to an
// append-only evidence file that outlives it and any Redis restart; the
// test counts from that evidence what was submitted, acked, lost and acked
// twice, the handler runs of one task that overlapped, and the runs begun
// after their lease deadline, and fails unless lost, acked twice,
// overlapping and late runs are all zero.
//
// The default size runs in CI in a minute or two. A big run:
//
//	go test ./internal/chaos -run TestChaos -timeout 1h -v \
//	    -chaos.tasks=50000 -chaos.phase=30s -chaos.workers=4 -chaos.slots=8
//
// See the flags in chaos_test.go.
package chaos
