package keys

// Worker holds the keys of one worker. Every key shares the worker's slot in
// the tagged layout.
type Worker struct {
	Hardware string // wkr:<type>:<id>:hardware (string, JSON)
	Config   string // wkr:<type>:<id>:config (string, JSON)
	Gen      string // wkr:<type>:<id>:gen (string, integer)
	State    string // wkr:<type>:<id>:state (hash: state, last_seen, last_error)
	Stats    string // wkr:<type>:<id>:stats (string, JSON)
}

// Worker returns the keys of worker id of type typ.
func (k Keys) Worker(typ, id string) Worker {
	base := k.join("wkr", k.tag(typ+":"+id))
	return Worker{
		Hardware: base + ":hardware",
		Config:   base + ":config",
		Gen:      base + ":gen",
		State:    base + ":state",
		Stats:    base + ":stats",
	}
}

// Workers is wkrs:<type> (set of worker ids).
func (k Keys) Workers(typ string) string { return k.join("wkrs", typ) }

// AllWorkers is wkrs:all (set of "<type>|<id>").
func (k Keys) AllWorkers() string { return k.join("wkrs", "all") }
