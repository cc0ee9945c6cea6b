package fleet_test

import (
	"context"
	"strconv"
	"testing"
	"time"
)

// BenchmarkKVSetThenGet: one process writes a key and then reads it back
// reads times, the pattern of a worker that keeps its own state in a KV.
// "fleet" is KV.Set then KV.GetString; "bare" is the floor: a plain SET
// then rueidis DoCache GETs (which, unlike fleet, may read its own write's
// old value until the invalidation arrives). An op is one write and its
// reads. Run:
//
//	go test -run '^$' -bench KVSetThenGet -benchtime 3s .
func BenchmarkKVSetThenGet(b *testing.B) {
	const nkeys, reads = 8, 20
	b.Run("fleet", func(b *testing.B) {
		f, _ := benchFleet(b)
		kv := f.KV("bench")
		ctx := context.Background()
		b.ResetTimer()
		for i := range b.N {
			k, v := "k"+strconv.Itoa(i%nkeys), strconv.Itoa(i)
			if err := kv.Set(ctx, k, v, 0); err != nil {
				b.Fatal(err)
			}
			for range reads {
				if got, _, err := kv.GetString(ctx, k); err != nil || got != v {
					b.Fatalf("read %q, %v after writing %q", got, err, v)
				}
			}
		}
	})
	b.Run("bare", func(b *testing.B) {
		_, raw := benchFleet(b)
		ctx := context.Background()
		b.ResetTimer()
		for i := range b.N {
			k, v := lastPrefix+"fleet:kv:bench:k"+strconv.Itoa(i%nkeys), strconv.Itoa(i)
			if err := raw.Do(ctx, raw.B().Set().Key(k).Value(v).Build()).Error(); err != nil {
				b.Fatal(err)
			}
			for range reads {
				if _, err := raw.DoCache(ctx, raw.B().Get().Key(k).Cache(), time.Minute).ToString(); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}
