package fleet

import "encoding/json"

// The readers' side of sealed values (seal.go): what Lookup, the lists,
// the dead letters and WatchProgress show, opened where this process can.

// sealerOf returns the Sealer of the queue named queue that this process
// made (NewQueue), else Options.OpenWith, or nil.
func (f *Fleet) sealerOf(queue string) Sealer {
	if e, ok := f.queues.Load(queue); ok {
		if s := e.(queueEntry).core().opts.Sealer; s != nil {
			return s
		}
	}
	return f.openWith
}

// shown returns a stored value of queue to show an operator (Lookup,
// the dead letters, the dashboard): opened when this process has the
// queue's Sealer and it opens, else as stored (a sealed string).
func (f *Fleet) shown(queue, kind string, raw json.RawMessage) json.RawMessage {
	if !isSealed(raw) {
		return raw
	}
	if plain, err := open(f.sealerOf(queue), queue, kind, raw); err == nil && json.Valid(plain) {
		return plain // (valid, as a RawMessage must be, even from a Sealer of your own)
	}
	return raw
}
