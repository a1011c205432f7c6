// Package stepworkers gives each of dragonboat's step workers a context of
// its own for baton's Raft log store (engine/seglog):
// dragonboat calls SaveRaftState from one goroutine per step worker, with
// the worker's 1-based id, so a store can keep a batch or buffer per
// worker, reused after each save, and never allocate or contend for one.
package stepworkers

import "sync"

// Default is dragonboat's default number of step workers
// (config.EngineConfig.ExecShards).
const Default = 16

// Contexts holds one *T per step worker, made when the store opens, and a
// pool for worker ids beyond them (a NodeHost configured with more workers
// than the store was told of still works).
type Contexts[T any] struct {
	fixed []*T
	spare sync.Pool
}

// New makes a context with mk for each of workers step workers (Default
// when workers is 0).
func New[T any](workers uint64, mk func() *T) *Contexts[T] {
	if workers == 0 {
		workers = Default
	}
	c := &Contexts[T]{fixed: make([]*T, workers)}
	for i := range c.fixed {
		c.fixed[i] = mk()
	}
	c.spare.New = func() any { return mk() }
	return c
}

// Get returns the context of the step worker with id, and the function
// that gives it back when the call is done.
func (c *Contexts[T]) Get(id uint64) (*T, func()) {
	if id >= 1 && id <= uint64(len(c.fixed)) {
		return c.fixed[id-1], func() {}
	}
	t := c.spare.Get().(*T)
	return t, func() { c.spare.Put(t) }
}

// Len is the number of step workers with a context of their own.
func (c *Contexts[T]) Len() int { return len(c.fixed) }
