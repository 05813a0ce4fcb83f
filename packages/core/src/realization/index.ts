/** What the service derives from positions: a vehicle's activity, geofences (docs/realization.md). */
export * from './activity.js';
export * from './fence-tracker.js';
export * from './geo.js';
export * from './geofences.js';
export * from './trip-realizer.js';
