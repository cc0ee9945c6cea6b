package fleet

// This file resizes a batch worker's slots while it runs (Worker.SetSlots,
// and the slots member of a pushed config): the slot count in force, the
// permits that bound what the fetcher reserves, the gate a task passes
// before its handler starts, and the slots that retire.

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/redis/rueidis"
)

// MaxSlots is the most slots Worker.SetSlots, or the slots member of a
// pushed config, may ask for.
const MaxSlots = 1 << 16

// configSlotsField is the top-level member of a worker's config that sets
// its slot count (Worker.SetSlots).
const configSlotsField = "slots"

// slotSize is what a worker keeps of its slot count (a part of Worker).
type slotSize struct {
	sizeMu    sync.Mutex                       // guards what follows
	target    int                              // the slot count in force (SetSlots)
	more      []*slotState                     // the states of slots beyond len(Worker.slots), made by SetSlots
	resize    func(n int, states []*slotState) // the running batch runner's; nil before Start
	startedAt int64                            // :hardware's started_at, kept when it is written again
	hwSlots   atomic.Int64                     // the slot count :hardware says
}

// SetSlots sets how many tasks the batch worker runs at once to n, while
// it runs or before Start. It returns at once; Slots and Stats report the
// new count, and Stats().Busy how many tasks still run.
//
// Growing starts fetching for the new slots at once. Shrinking lets the
// tasks that run finish; from the moment SetSlots returns, no task starts
// while n or more run, and the slots above n end as their tasks do. A task
// that was reserved for a slot but had not started when the count fell is
// put back at the head of its queue at once, its attempt uncounted (it
// never ran here; OnTaskEnd is not called for it), rather than held until
// its lease runs out. The heartbeat writes the new count (the stats frame's
// slots, and :hardware's).
//
// A pushed config sets it too: a top-level "slots" member, an integer from
// 1 to MaxSlots, resizes the worker when the config is applied (a config
// without it leaves the count alone); any other value refuses the config
// like any invalid one (last_error, state ERROR, OnConfig). A config type
// with a field of that JSON name sees the same value.
//
// May return ErrInvalidArgument (n below 1 or above MaxSlots, or a loop
// worker, whose slots cannot change while it runs; nothing changes), and
// the worker's options error (Err).
func (w *Worker) SetSlots(n int) error {
	if w.err != nil {
		return opErr("set slots", w.name(), w.err)
	}
	if err := w.slotsAllowed(n); err != nil {
		return opErr("set slots", w.name(), fmt.Errorf("%w: %w", ErrInvalidArgument, err))
	}
	w.setSlots(n)
	return nil
}

// Slots returns the slot count in force: WorkerOptions.Slots, or what
// SetSlots or a pushed config set last.
func (w *Worker) Slots() int {
	w.sizeMu.Lock()
	defer w.sizeMu.Unlock()
	return w.target
}

// slotsAllowed says why n cannot be the worker's slot count, naming the
// field as slots.
func (w *Worker) slotsAllowed(n int) error {
	switch {
	case n < 1 || n > MaxSlots:
		return fmt.Errorf("slots %d is not from 1 to %d", n, MaxSlots)
	case w.fixedSlots != "":
		return fmt.Errorf("slots: %s slot count cannot change", w.fixedSlots)
	}
	return nil
}

// configSlots reads the slots member of a config: has is false when it is
// absent or null; an error (ErrInvalidConfig, naming the field) when it is
// not an integer from 1 to MaxSlots.
func configSlots(raw []byte) (n int, has bool, err error) {
	m, err := decodeObject(raw)
	if err != nil {
		return 0, false, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	v, ok := m[configSlotsField]
	if !ok || v == nil {
		return 0, false, nil
	}
	num, ok := v.(json.Number)
	if ok {
		i, perr := strconv.ParseInt(num.String(), 10, 64)
		if perr == nil && i >= 1 && i <= MaxSlots {
			return int(i), true, nil
		}
	}
	b, _ := json.Marshal(v)
	return 0, false, fmt.Errorf("%w: slots (must be an integer from 1 to %d, not %s)", ErrInvalidConfig, MaxSlots, b)
}

// withoutSlots returns config v without its top-level slots member (the
// worker's slot count, which fleet judges itself: configSlots) unless
// schema declares it among its properties.
func withoutSlots(schema []byte, v any) any {
	m, ok := v.(map[string]any)
	if !ok {
		return v
	}
	if _, has := m[configSlotsField]; !has {
		return v
	}
	var root struct {
		Ref        string                     `json:"$ref"`
		Defs       map[string]json.RawMessage `json:"$defs"`
		Properties map[string]json.RawMessage `json:"properties"`
	}
	if json.Unmarshal(schema, &root) == nil {
		props := root.Properties
		if name, ok := strings.CutPrefix(root.Ref, "#/$defs/"); ok && props == nil {
			var def struct {
				Properties map[string]json.RawMessage `json:"properties"`
			}
			_ = json.Unmarshal(root.Defs[name], &def)
			props = def.Properties
		}
		if _, declared := props[configSlotsField]; declared {
			return v
		}
	}
	out := make(map[string]any, len(m))
	for k, x := range m {
		if k != configSlotsField {
			out[k] = x
		}
	}
	return out
}

// hardwareSlots writes :hardware again (SET XX, started_at kept) when its
// slot count is not n, the one in force: SetSlots changed it.
func (w *Worker) hardwareSlots(ctx context.Context, n int) error {
	if int64(n) == w.hwSlots.Load() {
		return nil
	}
	hw, err := json.Marshal(w.hardware())
	if err != nil {
		return err
	}
	c := w.f.client
	if err := c.Do(ctx, c.B().Set().Key(w.k.Hardware).Value(string(hw)).Xx().Build()).Error(); err != nil && !rueidis.IsRedisNil(err) {
		return err
	}
	return nil
}

// decodeWithSlots decodes a stored config as the worker's decode does, and
// reads its slots member, refused (ErrInvalidConfig) when out of range or
// when the worker is a loop worker.
func (w *Worker) decodeWithSlots(raw []byte) (val any, slots int, has bool, err error) {
	if val, err = w.decode(raw); err != nil {
		return nil, 0, false, err
	}
	if slots, has, err = configSlots(raw); err != nil {
		return nil, 0, false, err
	}
	if has && w.fixedSlots != "" {
		return nil, 0, false, fmt.Errorf("%w: slots (%s slot count cannot change)", ErrInvalidConfig, w.fixedSlots)
	}
	return val, slots, has, nil
}

// setSlots makes n the slot count: it makes the states of new slots, and
// tells the running batch runner, if any.
func (w *Worker) setSlots(n int) {
	w.sizeMu.Lock()
	defer w.sizeMu.Unlock()
	w.target = n
	for i := len(w.slots) + len(w.more); i < n; i++ {
		w.more = append(w.more, newSlotState(i))
	}
	if w.resize != nil {
		w.resize(n, w.allSlots())
	}
}

// allSlots returns the state of every slot the worker ever had, by index.
// w.sizeMu is held.
func (w *Worker) allSlots() []*slotState {
	return append(w.slots[:len(w.slots):len(w.slots)], w.more...)
}

// slotStates returns the states of the slots in force (index below the
// count), and of those above it whose task still runs.
func (w *Worker) slotStates() []*slotState {
	w.sizeMu.Lock()
	defer w.sizeMu.Unlock()
	all := w.allSlots()
	out := all[:min(w.target, len(all)):min(w.target, len(all))]
	for _, s := range all[len(out):] {
		if s.busy.Load() {
			out = append(out, s)
		}
	}
	return out
}

func newSlotState(i int) *slotState {
	return &slotState{index: i, changed: make(chan struct{}, 1), retire: make(chan struct{}, 1), metrics: map[string]float64{}}
}

// The runner's side: permits and the start gate. A permit is the right to
// hold one task: the free tokens (b.free), the tasks the fetcher reserved
// and has not handed yet, those waiting in b.tasks, and those in the
// slots' hands count held, which is brought back to the slot count as
// tasks end when it is above it. No task waits on a permit it may not use:
// a shrink drops the idle tokens and puts back the waiting tasks, the
// fetcher puts back what it reserved beyond the count, and a slot puts back
// a task that may not start.

// resize applies slot count n: permits for a larger count, the idle ones
// of a smaller count dropped, the waiting tasks beyond it put back, slots
// started for indexes below n and the idle ones above it told to end.
// states are the worker's slots by index (Worker.allSlots).
func (b *runner[C, O, P]) resize(n int, states []*slotState) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.target = n
	if b.ended {
		return // stopping: the slots end as the tasks run out
	}
	for b.held < n {
		b.held++
		b.free <- struct{}{} // never blocks: cap(b.free) >= MaxSlots
	}
	for b.held > n {
		select {
		case <-b.free:
			b.held--
			continue
		default:
		}
		break
	}
	var back []*Task[P]
	for b.held > n {
		select {
		case t := <-b.tasks:
			b.held--
			back = append(back, t)
			continue
		default:
		}
		break
	}
	if len(back) > 0 && !b.w.goSlot(func() {
		for _, t := range back {
			b.putBack(t)
		}
	}) {
		for _, t := range back {
			b.putBack(t)
		}
	}
	for i, st := range states {
		switch {
		case i < n && !st.live:
			st.live = true
			b.live++
			if !b.spawnSlot(st) {
				st.live = false
				b.live--
				b.unspawned = true
			}
		case i >= n && st.live:
			poke(st.retire)
		}
	}
}

// putBack puts a reserved task that will not start back at the head of its
// queue, its attempt uncounted; a task that Queue.Cancel asked to stop is
// buried instead (OnTaskEnd then says so).
func (b *runner[C, O, P]) putBack(t *Task[P]) {
	if err := b.release(t.r); err != nil && b.w.opts.OnTaskEnd != nil {
		b.w.opts.OnTaskEnd(t.ID, err)
	}
}

// giveBack returns k permits: as free tokens, or dropped while more are
// held than the slot count.
func (b *runner[C, O, P]) giveBack(k int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for range k {
		if b.held > b.target {
			b.held--
			continue
		}
		select {
		case b.free <- struct{}{}:
		default:
			b.held-- // cannot happen: cap(b.free) >= MaxSlots
		}
	}
}

// hand gives a task the fetcher reserved to the slots, unless its permit
// is beyond the slot count (a shrink came during the reserve): then it is
// put back at once.
func (b *runner[C, O, P]) hand(t *Task[P]) {
	b.mu.Lock()
	over := b.held > b.target
	if over {
		b.held--
	}
	b.mu.Unlock()
	if over {
		b.putBack(t)
		return
	}
	b.tasks <- t // a free slot takes it soon: there is one for each permit
}

// admit reports whether slot st may start a task now, and counts it
// running: its index is below the slot count and fewer tasks than the
// count run.
func (b *runner[C, O, P]) admit(st *slotState) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if st.index >= b.target || b.running >= b.target {
		return false
	}
	b.running++
	return true
}

// ran counts the end of a task that admit let start.
func (b *runner[C, O, P]) ran() {
	b.mu.Lock()
	b.running--
	b.mu.Unlock()
}

// retire reports whether slot st ends now: its index is at or above the
// slot count, or the fetcher is done (closed).
func (b *runner[C, O, P]) retire(st *slotState, closed bool) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if closed || st.index >= b.target {
		if st.live {
			st.live = false
			b.live--
		}
		return true
	}
	return false
}

// mayTake reports whether a slot may take its next task with its ack: not
// while a shrink is under way (more permits held, or more slots live, than
// the count), when the fetcher decides what is reserved.
func (b *runner[C, O, P]) mayTake() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.held <= b.target && b.live <= b.target
}

// endFetch marks the fetcher done and closes b.tasks: no slot starts any
// more, and the slots end as the tasks run out.
func (b *runner[C, O, P]) endFetch() {
	b.mu.Lock()
	b.ended = true
	b.mu.Unlock()
	close(b.tasks)
}
