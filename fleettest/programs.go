package fleettest

import "os"

// The programs the harness runs, from the environment, so that one suite
// runs on Redis or on a fork of it such as Valkey:
//
//   - FLEET_REDIS_SERVER names the server (default redis-server; for
//     example valkey-server);
//   - FLEET_REDIS_CLI names its cli (default redis-cli; valkey-cli);
//   - FLEET_REDIS_SENTINEL names the sentinel (default redis-sentinel;
//     when it is not on PATH, the server runs with --sentinel).
const (
	EnvServer   = "FLEET_REDIS_SERVER"
	EnvCli      = "FLEET_REDIS_CLI"
	EnvSentinel = "FLEET_REDIS_SENTINEL"
)

// program returns the value of env, or def when it is unset or empty.
func program(env, def string) string {
	if v := os.Getenv(env); v != "" {
		return v
	}
	return def
}

func serverProgram() string   { return program(EnvServer, "redis-server") }
func cliProgram() string      { return program(EnvCli, "redis-cli") }
func sentinelProgram() string { return program(EnvSentinel, "redis-sentinel") }
