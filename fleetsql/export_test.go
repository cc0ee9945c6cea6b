package fleetsql

// SetStepHook sets the hook called at each step of a relay batch
// ("selected", "submit", "submitted", "deleted", "committed"), for the
// tests that kill a relay process at a step. Not safe to call while a
// relay runs.
func SetStepHook(f func(step string)) { stepHook = f }
