package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/internal/broker/amqptest"
	"github.com/warrenhq/warren/protocol"
)

// The whole program against the local RabbitMQ, under a prefix of its
// own that is deleted afterwards.
func Example() {
	dir, err := os.MkdirTemp("", "warren-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	prefix := fmt.Sprintf("warren-example-%d.", os.Getpid())
	defer deleteTopology(prefix)
	if err := run(context.Background(), amqptest.URL(), prefix, "sqlite://"+filepath.Join(dir, "warren.db"), os.Stdout); err != nil {
		fmt.Println("error:", err)
	}
	// Output:
	// job completed: 5 of 5 tasks completed
	// longest: {"word":"deterministically","length":17}
}

// deleteTopology removes the example's exchanges and queues.
func deleteTopology(prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), broker.DialTimeout)
	defer cancel()
	conn, err := broker.Dial(ctx, amqptest.URL(), "warren example (cleanup)")
	if err != nil {
		fmt.Println("cleanup:", err)
		return
	}
	defer conn.Close()
	if err := broker.DeleteTopology(conn, protocol.NamesFor(prefix)); err != nil {
		fmt.Println("cleanup:", err)
	}
}
