package engine

import (
	"crypto/sha1"
	"encoding/hex"

	"github.com/redis/rueidis"

	"github.com/fleet-go/fleet/internal/script"
)

// The queue scripts the engine runs (scripts/queue_*.lua), linked by Link.
var (
	queueReserveScript *rueidis.Lua
	queueAckScript     *rueidis.Lua
	queueAbandonScript *rueidis.Lua
	queueEndScript     *rueidis.Lua
	queueExtendScript  *rueidis.Lua
	queueShardsScript  *rueidis.Lua

	// A Semaphore's scripts, on a sharded queue's fleet-wide permits
	// (permit.go).
	semAcquireScript *rueidis.Lua
	semReleaseScript *rueidis.Lua
	semExtendScript  *rueidis.Lua

	// reserveSHA is queue_reserve.lua's SHA1, for the EVALSHA that
	// armedTake sends after CLIENT CACHING YES.
	reserveSHA string
)

// Link makes the engine's script handles with l, the linker of the
// scripts/ files (which stay in the root, since go:embed reaches no file
// above its package). The root calls it once, as its package initializes,
// before any core is made.
func Link(l *script.Linker) {
	queueReserveScript = l.New("queue_reserve.lua")
	sum := sha1.Sum([]byte(l.Text("queue_reserve.lua")))
	reserveSHA = hex.EncodeToString(sum[:])
	queueAckScript = l.New("queue_ack.lua")
	queueAbandonScript = l.New("queue_abandon.lua")
	queueEndScript = l.New("queue_end.lua")
	queueExtendScript = l.New("queue_extend.lua")
	queueShardsScript = l.New("queue_shards.lua")
	semAcquireScript = l.New("sem_acquire.lua")
	semReleaseScript = l.New("sem_release.lua")
	semExtendScript = l.New("sem_extend.lua", script.Retryable)
}
