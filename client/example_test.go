package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/baton-dev/baton/client"
)

// deploy stands for the work the lock protects; it hands the fencing token
// to the resource, which refuses tokens older than the newest it has seen.
func deploy(ctx context.Context, token uint64) error { return nil }

// Serialize a job across machines: wait up to a minute for the lock, keep it
// alive while the job runs, stop the job if the lock is lost, release it at
// the end.
func Example() {
	c, err := client.New([]string{"127.0.0.1:7700", "127.0.0.1:7710", "127.0.0.1:7720"})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lock, err := c.Acquire(ctx, "deploy/prod", 10*time.Second, client.WaitForever)
	if errors.Is(err, client.ErrTimeout) {
		log.Print("someone else is deploying; try later")
		return
	}
	if err != nil {
		log.Fatal(err)
	}
	// Release with a context of its own: ctx may be over by then.
	defer lock.Release(context.Background())

	lock.KeepAlive()
	jobCtx, stop := context.WithCancel(context.Background())
	defer stop()
	go func() {
		<-lock.Done() // closed when the lock is lost (or released)
		stop()
	}()
	if err := deploy(jobCtx, lock.Token()); err != nil {
		log.Print(err)
	}
	if err := lock.Err(); err != nil {
		log.Printf("the lock was lost during the deploy: %v", err)
	}
}

// Check who holds a key.
func ExampleClient_Query() {
	c, err := client.New([]string{"127.0.0.1:7700"})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := c.Query(ctx, "deploy/prod")
	if err != nil {
		log.Fatal(err)
	}
	if st.Held {
		fmt.Printf("held by token %d for another %v\n", st.Token, st.Remaining)
	} else {
		fmt.Println("free")
	}
}

// A try-lock: take the lock only if nobody has it.
func ExampleClient_TryAcquire() {
	c, err := client.New([]string{"127.0.0.1:7700"})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	lock, err := c.TryAcquire(context.Background(), "cron/nightly-report", time.Hour)
	if errors.Is(err, client.ErrTimeout) {
		return // another machine runs it tonight
	}
	if err != nil {
		log.Fatal(err)
	}
	defer lock.Release(context.Background())
	// ... the report ...
}

// At most 4 encoders at once across the fleet: each takes one of 4 shared
// holds of the key (a counting semaphore), and the fifth waits, first come,
// first served, until one of the four releases its hold or its lease runs
// out. Every caller of the key must ask with the same permits.
func ExampleClient_AcquireShared() {
	c, err := client.New([]string{"127.0.0.1:7700"})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	hold, err := c.AcquireShared(ctx, "jobs/encode", 4, 30*time.Second, client.WaitForever)
	if errors.Is(err, client.ErrUnsupported) {
		log.Fatalf("this cluster has no shared holds yet: %v", err) // not at cluster version 4
	}
	if err != nil {
		log.Fatal(err)
	}
	defer hold.Release(context.Background()) // this hold only: it carries its own token
	hold.KeepAlive()
	// ... encode, stopping when hold.Done() is closed ...
}

// A job that must find its lock again if it crashes and is started again
// with the same run id: the owner names this run, so the second start gets
// the first one's grant back (same token, lease renewed) instead of
// waiting for it to run out. Only this run may use the owner: two holders
// with one owner share the lock.
func ExampleWithOwner() {
	c, err := client.New([]string{"127.0.0.1:7700"})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	runID := "nightly-2026-12-01" // from the scheduler, the same on a restart
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lock, err := c.Acquire(ctx, "cron/nightly-report", time.Minute, client.WaitForever, client.WithOwner("report:"+runID))
	if err != nil {
		log.Fatal(err)
	}
	defer lock.Release(context.Background())
	lock.KeepAlive()
	// ... the report, fenced with lock.Token() ...
}

// Replace a member whose machine is gone: remove it, then add the new
// machine, which is started with the command the add prints.
func ExampleClient_AddMember() {
	c, err := client.New([]string{"10.0.0.1:7700", "10.0.0.2:7700"})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	if err := c.RemoveMember(ctx, 3, false); errors.Is(err, client.ErrRefused) {
		log.Fatalf("not removed, nothing changed: %v", err) // the reason is in err
	} else if err != nil {
		log.Fatal(err)
	}
	id, err := c.AddMember(ctx, client.MemberAddrs{Raft: "10.0.0.4:7701", Client: "10.0.0.4:7700"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("on 10.0.0.4: batond --id %d --join 10.0.0.4:7701/10.0.0.4:7700 --data DIR\n", id)

	members, err := c.ListMembers(ctx)
	if err != nil {
		log.Fatal(err)
	}
	for _, m := range members {
		fmt.Println(m.ID, m.Role, m.Client) // the new one a learner until it has caught up
	}
}
