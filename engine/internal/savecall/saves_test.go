package savecall

import (
	"testing"
	"time"
)

func TestSavesCountAndTellTheObserver(t *testing.T) {
	type seen struct {
		synced bool
		took   time.Duration
	}
	var got []seen
	s := NewSaves(func(synced bool, took time.Duration) { got = append(got, seen{synced, took}) })
	s.Record(true, time.Now().Add(-time.Second))
	s.Record(false, time.Now())
	s.Record(true, time.Now())
	if synced, unsynced := s.Counts(); synced != 2 || unsynced != 1 {
		t.Fatalf("counts %d synced, %d not, want 2 and 1", synced, unsynced)
	}
	if len(got) != 3 || !got[0].synced || got[1].synced || !got[2].synced {
		t.Fatalf("observer saw %+v, want synced, not, synced", got)
	}
	if got[0].took < time.Second {
		t.Errorf("a save started a second ago took %v", got[0].took)
	}

	quiet := NewSaves(nil) // no observer: counts only
	quiet.Record(true, time.Now())
	if synced, _ := quiet.Counts(); synced != 1 {
		t.Errorf("without an observer: %d synced, want 1", synced)
	}
}
