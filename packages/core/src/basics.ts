/**
 * The part of this package that loads nothing heavy (no logger, metrics, model schemas, JSON
 * parsers): its errors, ids, lifecycles and event facts. For code that runs in worker threads
 * started with every store, such as the embedded event log's index thread, whose start this keeps
 * to a few milliseconds instead of about 60.
 */
export * from './errors.js';
export * from './ids.js';
export * from './lifecycle.js';
export * from './event-facts.js';
