/**
 * One document of each kind, valid per the model: the examples the served OpenAPI document gives
 * the requests and answers that carry documents of a kind (services/otm/test/openapi.test.ts checks
 * them with the model's validator). Swagger UI shows and sends them rather than a sample it would
 * generate from the model's recursive schemas (see openapi.ts).
 */
import type { KindSegment } from '@otm/model';

const EXAMPLE_IDS = {
  vehicle: '0b6b7f3e-5c1d-4a8e-9f11-2a7c0d5e9a01',
  route: '0b6b7f3e-5c1d-4a8e-9f11-2a7c0d5e9a02',
  sensor: '0b6b7f3e-5c1d-4a8e-9f11-2a7c0d5e9a03',
  location: '0b6b7f3e-5c1d-4a8e-9f11-2a7c0d5e9a04',
  actor: '0b6b7f3e-5c1d-4a8e-9f11-2a7c0d5e9a05',
  consignment: '0b6b7f3e-5c1d-4a8e-9f11-2a7c0d5e9a06',
  trip: '0b6b7f3e-5c1d-4a8e-9f11-2a7c0d5e9a07',
  event: '0b6b7f3e-5c1d-4a8e-9f11-2a7c0d5e9a08',
  action: '0b6b7f3e-5c1d-4a8e-9f11-2a7c0d5e9a09',
  goods: '0b6b7f3e-5c1d-4a8e-9f11-2a7c0d5e9a0a',
  document: '0b6b7f3e-5c1d-4a8e-9f11-2a7c0d5e9a0b',
  transportOrder: '0b6b7f3e-5c1d-4a8e-9f11-2a7c0d5e9a0c',
  constraint: '0b6b7f3e-5c1d-4a8e-9f11-2a7c0d5e9a0d',
  secondStop: '0b6b7f3e-5c1d-4a8e-9f11-2a7c0d5e9a0e',
  secondLocation: '0b6b7f3e-5c1d-4a8e-9f11-2a7c0d5e9a0f',
} as const;
const point = (lat: number, lon: number) => ({ type: 'latLonPointGeoReference', lat, lon });
const refTo = (entityType: string, uuid: string) => ({ associationType: 'reference', entityType, uuid });
/** The trip's first stop, also the example of an action. */
const stopExample = {
  actionType: 'stop',
  id: EXAMPLE_IDS.action,
  lifecycle: 'planned',
  sequenceNr: 1,
  location: refTo('location', EXAMPLE_IDS.location),
  startTime: '2026-11-23T06:00:00Z',
  endTime: '2026-11-23T06:30:00Z',
};
const goodsExample = {
  entityType: 'goods',
  type: 'items',
  id: EXAMPLE_IDS.goods,
  description: 'Tiles, 60x60',
  quantity: 12,
  grossWeight: { value: 9600, unit: 'kg' },
};

/** One document of each kind, valid per the model: the examples of the docs page. */
export const KIND_EXAMPLES: Readonly<Record<KindSegment, Record<string, unknown>>> = {
  vehicles: {
    entityType: 'vehicle',
    id: EXAMPLE_IDS.vehicle,
    name: 'Truck 17',
    vehicleType: 'tractor',
    licensePlate: 'BX-123-Z',
    fuels: [{ fuelType: 'diesel', averageConsumption: { value: 28.5, unit: 'l' } }],
    emptyWeight: { value: 7800, unit: 'kg' },
  },
  routes: {
    entityType: 'route',
    id: EXAMPLE_IDS.route,
    name: 'A28',
    geoReference: {
      type: 'latLonArrayGeoReference',
      points: [
        { lat: 52.09, lon: 5.12 },
        { lat: 52.51, lon: 6.09 },
      ],
    },
  },
  sensors: { entityType: 'sensor', id: EXAMPLE_IDS.sensor, name: 'Reefer temperature', sensorType: 'temperature' },
  locations: {
    entityType: 'location',
    id: EXAMPLE_IDS.location,
    name: 'Depot Utrecht',
    type: 'warehouse',
    geoReference: point(52.09, 5.12),
  },
  actors: { entityType: 'actor', id: EXAMPLE_IDS.actor, type: 'company', name: 'Fast Freight BV' },
  consignments: {
    entityType: 'consignment',
    id: EXAMPLE_IDS.consignment,
    name: 'Order 4711',
    status: 'confirmed',
    goods: [{ associationType: 'inline', entity: goodsExample }],
  },
  trips: {
    entityType: 'trip',
    id: EXAMPLE_IDS.trip,
    name: 'Utrecht - Zwolle',
    status: 'confirmed',
    vehicle: refTo('vehicle', EXAMPLE_IDS.vehicle),
    actions: [
      {
        associationType: 'inline',
        entity: stopExample,
      },
      {
        associationType: 'inline',
        entity: {
          actionType: 'stop',
          id: EXAMPLE_IDS.secondStop,
          lifecycle: 'planned',
          sequenceNr: 2,
          location: {
            associationType: 'inline',
            entity: { entityType: 'location', id: EXAMPLE_IDS.secondLocation, name: 'Customer Zwolle', geoReference: point(52.51, 6.09) },
          },
          startTime: '2026-11-23T08:00:00Z',
        },
      },
    ],
  },
  events: {
    eventType: 'locationUpdateEvent',
    id: EXAMPLE_IDS.event,
    lifecycle: 'actual',
    creationDate: '2026-11-23T06:41:12Z',
    geoReference: point(52.2, 5.4),
    vehicle: refTo('vehicle', EXAMPLE_IDS.vehicle),
  },
  actions: stopExample,
  goods: goodsExample,
  documents: {
    entityType: 'document',
    id: EXAMPLE_IDS.document,
    name: 'Proof of delivery',
    mimeType: 'application/pdf',
    content: { contentType: 'link', uri: 'https://files.example/pod/4711.pdf' },
  },
  transportOrders: {
    entityType: 'transportOrder',
    id: EXAMPLE_IDS.transportOrder,
    name: 'Transport order 4711',
    consignments: [refTo('consignment', EXAMPLE_IDS.consignment)],
  },
  constraints: {
    entityType: 'constraint',
    id: EXAMPLE_IDS.constraint,
    value: { type: 'timeWindowConstraint', startTime: '2026-11-23T06:00:00Z', endTime: '2026-11-23T10:00:00Z' },
  },
};
