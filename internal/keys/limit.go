package keys

// The kinds of the limits' names (limit.go), both last segments.
const (
	KindLimiter   Kind = "limiter name"
	KindSemaphore Kind = "semaphore name"
)

// Limit is fleet:limit:<name> (string: the limiter's theoretical arrival
// time, server µs; optional, TTL = until the limiter is full again).
func (k Keys) Limit(name string) string { return k.join("fleet", "limit", k.tag(name)) }

// Sem is fleet:sem:<name> (zset: permit token -> server ms when its lease
// ends; optional, TTL = its last member's deadline).
func (k Keys) Sem(name string) string { return k.join("fleet", "sem", k.tag(name)) }

// SemTomb is fleet:semtomb:<name> (zset: token -> server ms until which it
// holds; optional): the tokens of acquires abandoned while their script
// was in flight, which that script must not take a permit for. Its slot is
// the semaphore's; its TTL is its last member's.
func (k Keys) SemTomb(name string) string { return k.join("fleet", "semtomb", k.tag(name)) }
