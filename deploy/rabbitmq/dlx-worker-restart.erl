%% Restarts every quorum-queue dead-letter worker (rabbit_fifo_dlx_worker) on
%% this node that has held a dead letter unconfirmed for 30 seconds or more,
%% and prints the queues whose worker it restarted. For RabbitMQ 3.10 and
%% 3.11, where such a worker can hold a retry tier's messages for as long as
%% a dead node stays down (docs/operations.md, "RabbitMQ cluster"). Run it on
%% every node, every 30 seconds or so, as the text of rabbitmqctl eval
%% (dlx-worker-restart.sh does). It holds no dollar sign or backquote:
%% the rabbitmqctl wrapper of the Debian package passes its arguments
%% through a shell when run as root.
%%
%% A healthy worker settles each dead letter within milliseconds, so it is
%% never restarted. The new worker takes over the messages the old one held
%% (the queue returns them when the new one checks out) and sends them again
%% with a new client of each target queue: a message whose target had
%% confirmed it may arrive twice, which warren absorbs (its generation guard).
%% Only a worker whose source queue's leader is on this node is restarted,
%% as RabbitMQ itself starts one only there.
Now = os:system_time(millisecond),
Held = 30000,
IsLocalLeader = fun(QRef) ->
    case catch rabbit_amqqueue:lookup(QRef) of
        {ok, Q} ->
            case catch amqqueue:get_pid(Q) of
                {Name, _} when is_atom(Name) ->
                    case catch ra:members({Name, node()}) of
                        {ok, _, {Name, Leader}} -> Leader =:= node();
                        _ -> false
                    end;
                _ -> false
            end;
        _ -> false
    end
end,
Stuck = fun(S) ->
    is_tuple(S) andalso tuple_size(S) >= 9 andalso element(1, S) =:= state
        andalso is_map(element(8, S))
        andalso lists:any(fun(P) ->
                              is_tuple(P) andalso element(1, P) =:= pending
                                  andalso is_integer(element(9, P))
                                  andalso element(9, P) + Held =< Now
                          end, maps:values(element(8, S)))
end,
[begin
     QRef = element(2, S),
     ok = supervisor:terminate_child(rabbit_fifo_dlx_sup, Pid),
     {ok, _} = supervisor:start_child(rabbit_fifo_dlx_sup, [QRef]),
     rabbit_log:warning("restarted the dead-letter worker of ~s: it held a dead letter unconfirmed for ~b ms or more", [rabbit_misc:rs(QRef), Held]),
     element(4, QRef)
 end
 || {_, Pid, _, _} <- supervisor:which_children(rabbit_fifo_dlx_sup),
    is_pid(Pid),
    S <- [catch sys:get_state(Pid, 5000)],
    Stuck(S),
    IsLocalLeader(element(2, S))].
