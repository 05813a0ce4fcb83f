export {
  Dispatcher,
  DEFAULT_DISPATCHER_OPTIONS,
  KEPT_DELIVERIES,
  MAX_BATCH_BYTES,
  type DispatchSource,
  type DispatcherDeps,
  type DispatcherOptions,
  type RetryPolicy,
} from './dispatcher.js';
export { WebhookClient, signature, DEFAULT_HTTP_LIMITS, type AttemptResult, type HttpLimits } from './deliver.js';
export { matcher, type Matcher } from './filter.js';
export { TargetRule, RefusedTarget, embeddedIpv4, urlProblem, URL_MAX } from './ssrf.js';
export { subscriptions, MAX_SUBSCRIPTIONS_PER_TENANT, type SubscriptionRouteOptions } from './routes.js';
