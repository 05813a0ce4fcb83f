/** The query service: answers GETs from the entity store and the event store. */
import type { KindSegment } from '@otm/model';
import { notFound, type DocumentReader, type StoredDocument } from '@otm/core';

export interface QueryDeps {
  readonly entities: DocumentReader;
  readonly events: DocumentReader;
}

export class Query {
  constructor(private readonly deps: QueryDeps) {}

  /** The entity (its latest lifecycle unless `lifecycleRank` is given), or a 404. */
  async get(tenant: string, kind: KindSegment, key: string, lifecycleRank?: number): Promise<StoredDocument> {
    const found =
      (await this.deps.entities.get(tenant, kind, key, lifecycleRank)) ??
      (kind === 'events' ? await this.deps.events.get(tenant, kind, key, lifecycleRank) : undefined);
    if (found === undefined) throw notFound(`no ${kind} entity with id ${key}`);
    return found;
  }
}
