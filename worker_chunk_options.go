package fleet

// This file holds the chunk worker's options (ChunkOptions), apart from
// its machinery: the worker's registration (Hardware.Chunk) and the admin
// reads (WorkerInfo.Chunk) name them without depending on the chunk
// worker's files.

import (
	"fmt"
	"time"
)

// ChunkOptions says how a chunk worker (NewChunkWorker) gathers the tasks
// it hands its handler at once.
type ChunkOptions struct {
	// MinSize is the fewest tasks a chunk holds, unless MaxWait passed
	// since its first task came into the worker's hands (>= 1).
	MinSize int `json:"min_size"`
	// MaxSize is the most tasks a chunk holds (MinSize <= MaxSize <=
	// MaxReserve).
	MaxSize int `json:"max_size"`
	// MaxWait is how long a chunk of fewer than MinSize tasks waits for
	// more, from its first task (>= 0; 0: it goes as soon as no more are
	// at hand). In JSON (Hardware.Chunk, WorkerInfo.Chunk): nanoseconds.
	MaxWait time.Duration `json:"max_wait"`
}

// check says what is wrong with o, naming the field.
func (o ChunkOptions) check() error {
	switch {
	case o.MinSize < 1:
		return fmt.Errorf("%w: ChunkOptions.MinSize %d must be >= 1", ErrInvalidOptions, o.MinSize)
	case o.MaxSize < o.MinSize:
		return fmt.Errorf("%w: ChunkOptions.MaxSize %d must be >= MinSize %d", ErrInvalidOptions, o.MaxSize, o.MinSize)
	case o.MaxSize > MaxReserve:
		return fmt.Errorf("%w: ChunkOptions.MaxSize %d must be <= MaxReserve %d", ErrInvalidOptions, o.MaxSize, MaxReserve)
	case o.MaxWait < 0:
		return fmt.Errorf("%w: ChunkOptions.MaxWait %v must be >= 0", ErrInvalidOptions, o.MaxWait)
	}
	return nil
}
