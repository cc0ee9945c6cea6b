package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/fleet-go/fleet/internal/keys"
	"github.com/fleet-go/fleet/internal/script"
)

var (
	workerSetConfigScript  = newScript("worker_set_config.lua")
	workerReadConfigScript = newScript("worker_read_config.lua", script.ReadOnly)
)

// maxGen bounds a pushed gen: Lua numbers are doubles, exact up to 2^53.
const maxGen = 1 << 53

// UpdateConfig merges patch, a JSON merge patch (RFC 7386: objects merge
// recursively, null deletes a member, anything else replaces), into the
// stored config of worker id of type typ (wkr:<type>:<id>:config), and
// raises its gen (wkr:<type>:<id>:gen) by one. It returns the new gen.
//
// The merge is done in Go over the exact JSON (numbers keep every digit,
// empty objects and arrays keep their kind; Lua's cjson keeps neither), and
// written by one script that stores the config and raises the gen only if
// the gen is still the one the merge started from; a concurrent change
// makes it merge again. The running worker sees the new gen at once through
// the client-side caching invalidation of the gen key.
//
// The worker must have registered (its gen key exists), or UpdateConfig
// returns ErrWorkerNotFound and writes nothing. When the catalog
// (PublishCatalog) has a config schema for typ, the merged config must
// meet it (types, required fields, bounds, enums, lengths: what the
// worker's validate tags say), or UpdateConfig returns ErrInvalidConfig
// naming the failing fields and writes nothing; the worker would refuse
// such a config. Without a catalog entry, only the worker checks it. A
// top-level "slots" member sets the worker's slot count (Worker.SetSlots):
// it must be an integer from 1 to MaxSlots, or UpdateConfig returns
// ErrInvalidConfig naming it and writes nothing; the catalog's schema
// judges it only when it declares it.
//
// May return ErrInvalidName, ErrWorkerNotFound, ErrInvalidConfig (patch or
// stored config not a JSON object, or a merged config that fails the
// catalog's schema; nothing changes), ErrDecode (stored config not JSON),
// ErrWrongType, ErrUnavailable.
func (f *Fleet) UpdateConfig(ctx context.Context, typ, id string, patch json.RawMessage) (int64, error) {
	const op = "update config"
	name := typ + "|" + id
	if err := workerNames(typ, id); err != nil {
		return 0, opErr(op, name, err)
	}
	if err := f.alive(ctx); err != nil {
		return 0, opErr(op, name, err)
	}
	p, err := decodeObject(patch)
	if err != nil {
		return 0, opErr(op, name, fmt.Errorf("%w: patch: %w", ErrInvalidConfig, err))
	}
	schemas, hasSchema, err := f.CatalogSchemas(ctx, typ)
	if err != nil {
		return 0, opErr(op, name, err)
	}
	k := f.keys.Worker(typ, id)
	bo := backoff{min: time.Millisecond, max: 50 * time.Millisecond}
	for {
		gen, raw, err := f.readConfig(ctx, k)
		if err != nil {
			return 0, opErr(op, name, err)
		}
		var target any = map[string]any{}
		if raw != nil {
			if target, err = decodeJSON([]byte(*raw)); err != nil {
				return 0, opErr(op, name, fmt.Errorf("%w: stored config: %w", ErrDecode, err))
			}
		}
		target = mergePatch(target, p)
		merged, err := encodeJSON(target)
		if err != nil {
			return 0, opErr(op, name, err)
		}
		if _, _, err := configSlots(merged); err != nil {
			return 0, opErr(op, name, err)
		}
		if hasSchema && len(schemas.Config) > 0 && string(schemas.Config) != "null" {
			fails, err := checkSchema(schemas.Config, withoutSlots(schemas.Config, target))
			if err != nil {
				return 0, opErr(op, name, fmt.Errorf("%w: catalog config schema of %q: %w", ErrDecode, typ, err))
			}
			if len(fails) > 0 {
				return 0, opErr(op, name, fmt.Errorf("%w: fails the catalog's config schema of %q: %s", ErrInvalidConfig, typ, strings.Join(fails, ", ")))
			}
		}
		ok, newGen, err := f.setConfig(ctx, k, merged, "cas", gen)
		if err != nil {
			return 0, opErr(op, name, err)
		}
		if newGen < 0 {
			return 0, opErr(op, name, fmt.Errorf("%w: no worker %s of type %s registered (its gen key is missing)", ErrWorkerNotFound, id, typ))
		}
		if ok {
			f.configChanged(k)
			return newGen, nil
		}
		t := time.NewTimer(bo.next())
		select {
		case <-ctx.Done():
			t.Stop()
			return 0, opErr(op, name, ctx.Err())
		case <-t.C:
		}
	}
}

// PushConfig replaces the stored config of worker id of type typ with
// config (encoded as JSON; it must be a JSON object) and sets its gen to
// gen, in one script, only if gen is above the stored gen. A refused push
// writes nothing and returns a *StaleGenError (errors.Is ErrStaleGen). Use
// it to push a whole config from a source of truth that numbers its own
// generations; UpdateConfig patches and counts for you.
//
// A top-level "slots" member sets the worker's slot count (Worker.SetSlots);
// one that is not an integer from 1 to MaxSlots is refused
// (ErrInvalidConfig naming it), and nothing is written.
//
// May return ErrInvalidName, ErrStaleGen, ErrInvalidConfig, ErrInvalidArgument
// (gen above 2^53), ErrWrongType, ErrUnavailable.
func (f *Fleet) PushConfig(ctx context.Context, typ, id string, config any, gen int64) error {
	const op = "push config"
	name := typ + "|" + id
	if err := workerNames(typ, id); err != nil {
		return opErr(op, name, err)
	}
	if err := f.alive(ctx); err != nil {
		return opErr(op, name, err)
	}
	if gen > maxGen {
		return opErr(op, name, fmt.Errorf("%w: gen %d is above 2^53", ErrInvalidArgument, gen))
	}
	b, err := configJSON(config)
	if err != nil {
		return opErr(op, name, err)
	}
	if _, _, err := configSlots(b); err != nil {
		return opErr(op, name, err)
	}
	k := f.keys.Worker(typ, id)
	if gen <= 0 {
		cur, _, err := f.readConfig(ctx, k)
		if err != nil {
			return opErr(op, name, err)
		}
		return &StaleGenError{Type: typ, ID: id, Pushed: gen, Current: cur}
	}
	ok, cur, err := f.setConfig(ctx, k, b, "push", gen)
	if err != nil {
		return opErr(op, name, err)
	}
	if !ok {
		return &StaleGenError{Type: typ, ID: id, Pushed: gen, Current: cur}
	}
	f.configChanged(k)
	return nil
}

// WorkerConfig returns the stored config and gen of worker id of type typ (gen
// 0 and a nil config when it has none). May return ErrInvalidName,
// ErrWrongType, ErrUnavailable.
func (f *Fleet) WorkerConfig(ctx context.Context, typ, id string) (json.RawMessage, int64, error) {
	name := typ + "|" + id
	if err := workerNames(typ, id); err != nil {
		return nil, 0, opErr("config", name, err)
	}
	if err := f.alive(ctx); err != nil {
		return nil, 0, opErr("config", name, err)
	}
	gen, raw, err := f.readConfig(ctx, f.keys.Worker(typ, id))
	if err != nil || raw == nil {
		return nil, gen, opErr("config", name, err)
	}
	return json.RawMessage(*raw), gen, nil
}

// configChanged wakes this process's watchers of k's gen when no server
// invalidation will (caching off).
func (f *Fleet) configChanged(k keys.Worker) {
	if !f.cache {
		f.watch.PokeAll(k.Gen)
	}
}

func workerNames(typ, id string) error {
	return keys.Join(keys.Check(keys.KindType, typ), keys.Check(keys.KindWorker, id))
}

// readConfig reads gen and config together (gen 0, nil when missing).
func (f *Fleet) readConfig(ctx context.Context, k keys.Worker) (int64, *string, error) {
	res, err := workerReadConfigScript.Exec(ctx, f.client, []string{k.Config, k.Gen}, nil).ToArray()
	if err != nil {
		return 0, nil, err
	}
	if len(res) != 2 {
		return 0, nil, unexpectedReply("read config", len(res))
	}
	var gen int64
	if s, err := res[0].ToString(); err == nil {
		if gen, err = strconv.ParseInt(s, 10, 64); err != nil {
			return 0, nil, fmt.Errorf("%w: %s holds %q, not an integer", ErrWrongType, k.Gen, s)
		}
	}
	var raw *string
	if s, err := res[1].ToString(); err == nil {
		raw = &s
	}
	return gen, raw, nil
}

func (f *Fleet) setConfig(ctx context.Context, k keys.Worker, config []byte, mode string, gen int64) (bool, int64, error) {
	res, err := workerSetConfigScript.Exec(ctx, f.client, []string{k.Config, k.Gen},
		[]string{string(config), mode, strconv.FormatInt(gen, 10)}).ToArray()
	if err != nil {
		return false, 0, err
	}
	if len(res) != 2 {
		return false, 0, unexpectedReply("set config", len(res))
	}
	ok, _ := res[0].AsInt64()
	if ok == -1 {
		return false, -1, nil // cas on a worker with no gen key
	}
	cur, err := res[1].AsInt64()
	if err != nil {
		return false, 0, fmt.Errorf("gen reply to set config: %w", err)
	}
	return ok == 1, cur, nil
}

// decodeConfig decodes a stored config into a C and validates it.
func decodeConfig[C any](raw []byte) (C, error) {
	var c C
	if _, err := decodeObject(raw); err != nil {
		return c, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return c, fmt.Errorf("%w: does not decode into %T: %w", ErrInvalidConfig, c, err)
	}
	if err := validateStruct(c); err != nil {
		return c, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return c, nil
}

// validateStruct checks the validate tags of v when it is a struct (or a
// pointer to one), naming the failing fields by their JSON names.
func validateStruct(v any) error {
	rv := reflect.ValueOf(v)
	if rv.Kind() == reflect.Pointer {
		if rv.IsNil() {
			return nil
		}
		rv = rv.Elem()
	}
	if rv.Kind() != reflect.Struct {
		return nil
	}
	err := payloadValidator.Struct(v)
	if err == nil {
		return nil
	}
	return errors.New(validationFields(err))
}

// recordApplied writes applied_gen, the gen of the config the worker runs,
// into its :state hash (a derived field, docs/SCHEMA.md), so that
// Fleet.Workers tells it from the stored gen, which may be newer (not yet
// seen, or refused).
func (w *Worker) recordApplied(gen int64) {
	c := w.f.client
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Do(ctx, c.B().Hset().Key(w.k.State).FieldValue().
		FieldValue("applied_gen", strconv.FormatInt(gen, 10)).Build()).Error(); err != nil {
		w.log.Warn("fleet: worker applied gen not written", "err", err)
	}
}

// configSnap is a config a worker applied, with its gen.
type configSnap struct {
	gen int64
	val any    // the C
	raw []byte // as stored
}

// watchConfig applies each new gen of the worker's config until ctx ends.
// It arms client-side caching tracking on the gen key and sleeps until the
// server invalidates it (a nil invalidation wakes every watcher), or until
// the fallback poll.
func (w *Worker) watchConfig(ctx context.Context) {
	f := w.f
	ch, stop := f.watch.Listen(w.k.Gen)
	defer stop()
	poll := time.NewTimer(0)
	defer poll.Stop()
	bo := backoff{min: 50 * time.Millisecond, max: w.opts.ConfigPoll}
	for {
		err := w.checkConfig(ctx)
		wait := w.opts.ConfigPoll
		if err != nil && ctx.Err() == nil {
			w.log.Warn("fleet: worker config check failed", "err", err)
			wait = bo.next()
		} else {
			bo.n = 0
		}
		poll.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-ch:
		case <-poll.C:
		}
	}
}

// checkConfig reads the gen (through the cache, which arms the server's
// invalidation), and applies the config when the gen rose.
func (w *Worker) checkConfig(ctx context.Context) error {
	s, err := w.f.track(ctx, w.k.Gen)
	if err != nil {
		return err
	}
	if s == nil {
		return nil
	}
	gen, err := strconv.ParseInt(*s, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: %s holds %q, not an integer", ErrWrongType, w.k.Gen, *s)
	}
	if gen <= w.seenGen.Load() {
		return nil
	}
	gen, raw, err := w.f.readConfig(ctx, w.k)
	if err != nil {
		return err
	}
	if raw == nil {
		raw = new(string)
		*raw = "{}"
	}
	w.applyConfig(gen, []byte(*raw))
	return nil
}

// applyConfig decodes and hands config gen to the slots, unless a gen as
// new was seen already. An invalid config is refused: the slots keep
// theirs, and the error goes to last_error.
func (w *Worker) applyConfig(gen int64, raw []byte) {
	w.cfgMu.Lock()
	defer w.cfgMu.Unlock()
	if gen <= w.seenGen.Load() {
		return
	}
	w.seenGen.Store(gen)
	val, slots, has, err := w.decodeWithSlots(raw)
	if err != nil {
		err = within("config gen "+strconv.FormatInt(gen, 10)+" refused", err)
		w.fail(err, false)
		if w.opts.OnConfig != nil {
			w.opts.OnConfig(gen, err)
		}
		return
	}
	w.cfg.Store(&configSnap{gen: gen, val: val, raw: raw})
	w.clearConfigError()
	if has {
		w.setSlots(slots)
	}
	for _, s := range w.slotStates() {
		poke(s.changed)
	}
	if w.opts.OnConfig != nil {
		w.opts.OnConfig(gen, nil)
	}
	w.recordApplied(gen)
}
