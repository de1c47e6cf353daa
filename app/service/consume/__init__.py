"""Stream sources and sinks: trials read from a broker's stream, applied as the REST
calls apply them, answered to a reply stream (``committee consume``; docs/streams.rst).

* :mod:`~app.service.consume.messages`: a message and the call it asks for;
* :mod:`~app.service.consume.consumer`: the loop that reads, applies, answers and
  acknowledges, with an API key's rights;
* :mod:`~app.service.consume.redis_streams` and
  :mod:`~app.service.consume.nats_jetstream`: the two brokers;
* :mod:`~app.service.consume.sources`: a source from its URL.
"""
