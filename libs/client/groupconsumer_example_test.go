package client_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/sluice-io/sluice/libs/client"
)

// A group consumer reads the partitions its group assigns it and commits
// what it returned, as Kafka's KafkaConsumer with enable.auto.commit does.
func ExampleClient_NewGroupConsumer() {
	c, err := client.New(client.Config{Bootstrap: []string{"127.0.0.1:9090"}})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	g, err := c.NewGroupConsumer(client.GroupConsumerConfig{
		GroupID:    "billing",
		Topics:     []string{"orders"},
		AutoCommit: true,
		Reset:      client.ResetEarliest,
		OnRevoked: func(ctx context.Context, tps []client.TopicPartition) {
			log.Printf("giving up %v", tps)
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := g.Close(ctx); err != nil {
			log.Print(err)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for ctx.Err() == nil {
		recs, err := g.Poll(ctx)
		if err != nil && ctx.Err() == nil {
			log.Fatal(err)
		}
		for _, r := range recs {
			fmt.Printf("%s-%d@%d: %s\n", r.Topic, r.Partition, r.Offset, r.Value)
		}
	}
}
