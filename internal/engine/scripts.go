package engine

import "github.com/fleet-go/fleet/internal/script"

// The queue scripts the engine runs (scripts/queue_*.lua), linked by Link.
var (
	queueReserveScript *script.Script
	queueAckScript     *script.Script
	queueAbandonScript *script.Script
	queueEndScript     *script.Script
	queueExtendScript  *script.Script
	queueShardsScript  *script.Script

	// A Semaphore's scripts, on a sharded queue's fleet-wide permits
	// (permit.go).
	semAcquireScript *script.Script
	semReleaseScript *script.Script
	semExtendScript  *script.Script
)

// Link makes the engine's script handles with l, the linker of the
// scripts/ files (which stay in the root, since go:embed reaches no file
// above its package). The root calls it once, as its package initializes,
// before any core is made.
func Link(l *script.Linker) {
	queueReserveScript = l.New("queue_reserve.lua")
	queueAckScript = l.New("queue_ack.lua")
	queueAbandonScript = l.New("queue_abandon.lua")
	queueEndScript = l.New("queue_end.lua")
	queueExtendScript = l.New("queue_extend.lua")
	queueShardsScript = l.New("queue_shards.lua")
	semAcquireScript = l.New("sem_acquire.lua")
	semReleaseScript = l.New("sem_release.lua")
	semExtendScript = l.New("sem_extend.lua", script.Retryable)
}
