package savecall

import (
	"sync/atomic"
	"time"
)

// Observer is told of every SaveRaftState call that wrote something:
// whether the call was synced, and how long it took from its start to its
// return (for a synced call, the wait for the device's flush included,
// which is most of it). The node's metrics are one.
type Observer func(synced bool, took time.Duration)

// Saves counts a store's SaveRaftState writes by whether they were synced,
// and passes each one on to the store's Observer, if it has one.
type Saves struct {
	synced, unsynced atomic.Uint64
	observe          Observer
}

// NewSaves returns counts that tell observe (nil for nobody) of each save.
func NewSaves(observe Observer) *Saves {
	return &Saves{observe: observe}
}

// Record counts one save that wrote something, started at start.
func (s *Saves) Record(synced bool, start time.Time) {
	if synced {
		s.synced.Add(1)
	} else {
		s.unsynced.Add(1)
	}
	if s.observe != nil {
		s.observe(synced, time.Since(start))
	}
}

// Counts returns how many saves were synced and how many were not.
func (s *Saves) Counts() (synced, unsynced uint64) {
	return s.synced.Load(), s.unsynced.Load()
}
