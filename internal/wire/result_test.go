package wire_test

import (
	"encoding/json"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/internal/wire"
	"github.com/warrenhq/warren/protocol"
)

func TestResults(t *testing.T) {
	t.Parallel()
	r := protocol.Result{JobID: "job", TaskID: 7, Result: json.RawMessage(`49`), Status: protocol.StatusCompleted, Worker: "w", Attempt: 1}
	out, err := wire.Results(names, []protocol.Result{r}, false)
	require.NoError(t, err)
	require.Equal(t, names.ResultsExchange, out.Exchange)
	require.Equal(t, protocol.RoutingKeyResult, out.Key)
	require.Equal(t, protocol.MessageID("job", 7), out.Msg.MessageId)
	require.Equal(t, "job", out.Msg.CorrelationId)
	require.Equal(t, protocol.ContentType, out.Msg.ContentType)
	require.Equal(t, amqp.Persistent, out.Msg.DeliveryMode)
	require.Empty(t, out.Msg.Headers)
	require.JSONEq(t, `{"job_id":"job","task_id":7,"result":49,"status":"completed","worker":"w","attempt":1}`, string(out.Msg.Body))

	r2 := r
	r2.TaskID = 9
	out, err = wire.Results(names, []protocol.Result{r, r2}, true)
	require.NoError(t, err)
	require.Equal(t, protocol.BatchMessageID("job", 7, 2), out.Msg.MessageId)
	require.Equal(t, "job", out.Msg.CorrelationId)
	rs, err := wire.ReadResults(amqp.Delivery{Body: out.Msg.Body})
	require.NoError(t, err)
	require.Len(t, rs, 2)
	require.Equal(t, "job", rs[1].JobID)
	require.EqualValues(t, 9, rs[1].TaskID)

	// A batch of one is still a result batch: it answers a task batch.
	out, err = wire.Results(names, []protocol.Result{r}, true)
	require.NoError(t, err)
	require.Equal(t, protocol.BatchMessageID("job", 7, 1), out.Msg.MessageId)
	require.Contains(t, string(out.Msg.Body), `"results"`)

	_, err = wire.Results(names, nil, false)
	require.Error(t, err)
}

func TestReadResultsRefusesMalformedMessages(t *testing.T) {
	t.Parallel()
	_, err := wire.ReadResults(amqp.Delivery{Body: []byte(`{"job_id":"job"}`)})
	require.ErrorIs(t, err, protocol.ErrMalformed)
}
