/**
 * drydock's own service images by their stable names, and the socket folders
 * of a service's image that its sandbox shares.
 */
import { namedServiceImage, serviceImageName } from '../../sandbox-images/service-images';
import { socketFoldersOf } from '../../sandbox/services';

test('a repo names a service image by a stable name, never a hash', () => {
  expect(serviceImageName('postgres')).toBe('drydock/postgres:17');
  expect(serviceImageName('redis')).toBe('drydock/redis:8');
  expect(namedServiceImage('drydock/postgres:17')).toBe('postgres');
  expect(namedServiceImage('drydock/postgres')).toBe('postgres');
  expect(namedServiceImage('drydock/redis:latest')).toBe('redis');
  // Another version, another image or another registry's drydock/ is not one of them.
  expect(namedServiceImage('drydock/postgres:16')).toBeUndefined();
  expect(namedServiceImage('drydock/mysql:8')).toBeUndefined();
  expect(namedServiceImage('postgres:17')).toBeUndefined();
  expect(namedServiceImage('registry.example/drydock/postgres:17')).toBeUndefined();
});

test("a PostgreSQL image's socket folder is shared, by its environment or its volumes; not a data folder", () => {
  const official = { env: ['PATH=/usr/bin', 'PGDATA=/var/lib/postgresql/data'], volumes: ['/var/lib/postgresql/data'] };
  expect(socketFoldersOf(official, { data: [] })).toEqual(['/var/run/postgresql']);
  const drydock = {
    env: ['PGDATA=/var/lib/postgresql/data'],
    volumes: ['/var/lib/postgresql/data', '/var/run/postgresql/'],
  };
  expect(socketFoldersOf(drydock, { data: ['/var/lib/postgresql/data'] })).toEqual(['/var/run/postgresql']);
  expect(socketFoldersOf({ env: [], volumes: ['/var/lib/mysql', '/var/run/mysqld'] }, { data: [] })).toEqual([
    '/var/run/mysqld',
  ]);
  expect(socketFoldersOf({ env: ['REDIS_VERSION=8'], volumes: ['/data'] }, { data: ['/data'] })).toEqual([]);
  // A repo that keeps the folder as data keeps it to itself.
  expect(socketFoldersOf(official, { data: ['/var/run/postgresql'] })).toEqual([]);
});
