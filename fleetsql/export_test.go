package fleetsql

// SetStepHook sets the hook called at each step of a relay batch
// ("selected", "submit", "submitted", "deleted", "committed") with the
// relay's outbox, for the tests that kill a relay process or restart a
// database at a step; nil removes it.
func SetStepHook(f func(o *Outbox, step string)) {
	if f == nil {
		stepHook.Store(nil)
		return
	}
	stepHook.Store(&f)
}

// MigrateLockKey is the PostgreSQL advisory lock key Migrate holds for o.
func MigrateLockKey(o *Outbox) int64 { return migrateLockKey(o.qTable) }
