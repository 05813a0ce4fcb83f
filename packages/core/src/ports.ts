/**
 * The ports: the interfaces between the service's code and what stores and carries its data. Each
 * has an embedded adapter (one process, a data folder) and a distributed one (Kafka, Redis,
 * ClickHouse), and a contract suite runs against both (test/contract/). By what they are for:
 *
 * - ports/bus.ts: the bus (`Bus`, its subscriptions);
 * - ports/stores.ts: the entity store (`EntityStore`, units of work `EntityTx`, lists), the event
 *   store of telemetry (`EventStore`), and `TelemetrySideEffects`;
 * - ports/feed.ts: the change feed (`ChangeFeed`) and the entity export's (`FeedExport`,
 *   `EntityChangeSink`);
 * - ports/tracks.ts: tracks (`TrackReader`) and latest positions (`PositionReader`);
 * - ports/webhooks.ts: webhook subscriptions (`SubscriptionStore`);
 * - ports/access.ts: API keys (`ApiKeyStore`) and the slots of open streams (`StreamSlots`).
 */
export * from './ports/bus.js';
export * from './ports/stores.js';
export * from './ports/feed.js';
export * from './ports/tracks.js';
export * from './ports/webhooks.js';
export * from './ports/access.js';
