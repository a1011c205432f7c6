package stepworkers

import "testing"

func TestContexts(t *testing.T) {
	made := 0
	c := New(3, func() *int { made++; v := made; return &v })
	if c.Len() != 3 || made != 3 {
		t.Fatalf("%d contexts, %d made; want 3, 3", c.Len(), made)
	}
	for id := uint64(1); id <= 3; id++ {
		a, release := c.Get(id)
		b, _ := c.Get(id)
		release()
		if a != b || *a != int(id) {
			t.Fatalf("worker %d: contexts %d and %d, want its own, %d, twice", id, *a, *b, id)
		}
	}
	// Ids beyond the workers (and 0) share pooled contexts, each in use by
	// one caller at a time.
	x, releaseX := c.Get(4)
	y, releaseY := c.Get(0)
	if x == y || *x <= 3 || *y <= 3 {
		t.Fatalf("pooled contexts %d and %d: want two others than the workers'", *x, *y)
	}
	releaseX()
	releaseY()
	if New(0, func() *int { return new(int) }).Len() != Default {
		t.Fatal("0 workers is not dragonboat's default")
	}
}
